// `cohort trace RUN_DIR -o trace.json`: every rank's step timelines from the run's event log
// (RUN_DIR/events.jsonl, the "timeline" of each metrics record: docs/monitoring.md#cohort-trace-run_dir) as
// a Chrome trace event file, which Perfetto's UI and chrome://tracing open: one process per rank,
// threads for compute, communication and I/O (a second lane of a kind where spans overlap
// without nesting), complete ("X") events in microseconds on the job clock, and a flow arrow from
// each bucket's launch (in backward) to its completion.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace cohort::tools {

struct TraceOptions {
  std::string run_dir;
  std::string output = "trace.json";  // "-": standard output
  int64_t first_step = 0;             // steps outside [first_step, last_step] are left out
  int64_t last_step = INT64_MAX;
};

/// Adds the `trace` command to `app`.
CLI::App* add_trace_command(CLI::App& app, TraceOptions& options);

/// Writes the trace; returns the exit status (errors: one line on stderr).
int run_trace_command(const TraceOptions& options);

}  // namespace cohort::tools
