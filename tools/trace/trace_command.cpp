// `cohort trace`: the run's step timelines as a Chrome trace event file. See trace_command.h and
// docs/monitoring.md#cohort-trace-run_dir.
//
// The log is input from outside: lines are read with a length cap (a metrics datagram is at most
// 64 KiB; a longer line is skipped whole, never held), parsed with the depth cap of
// runtime/json_fields.h, and every field is checked before use: a span whose name is not a short
// printable string, whose category is not compute/comm/io or whose times are not trace_finite is left
// out and counted. What is written is built from checked values only. At most kTraceMaxSpans spans are
// kept (--steps chooses fewer steps of a longer run).
#include "trace_command.h"

#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "runtime/json_fields.h"

namespace cohort::tools {
namespace {

using json = nlohmann::json;

constexpr size_t kTraceMaxLine = 1 << 20;         // longer lines are skipped
constexpr size_t kTraceMaxSpans = 2'000'000;      // spans kept in all
constexpr size_t kTraceSpansPerRecord = 4096;  // the worker sends at most 256; the rest is not its
const char* const kTraceCats[] = {"compute", "comm", "io"};

struct TraceSpan {
  int rank = 0;
  int cat = 0;  // index into kTraceCats
  int64_t step = 0;
  std::string name;
  int64_t begin_ns = 0, end_ns = 0;  // after the trace's origin
  double abs_s = 0;                  // job-clock seconds (before the origin is known)
  double dur_s = 0;
  json args;  // checked: index, bytes, algorithm, what
  int lane = 0;
};

struct TraceRankClock {
  double offset_s = 0, error_s = 0;
  bool seen = false;
};

bool trace_text_ok(const json& j, size_t max) {
  if (!j.is_string()) return false;
  const auto& s = j.get_ref<const std::string&>();
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

std::optional<double> trace_finite(const json& j) {
  if (!j.is_number()) return std::nullopt;
  const double v = j.get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

// The checked args of a span: only the fields the format names.
// j[key] as an integer within [lo, hi]; nullopt where it is absent or is not.
std::optional<int64_t> trace_integer(const json& j, const char* key, int64_t lo, int64_t hi = INT64_MAX) {
  auto it = j.find(key);
  if (it == j.end() || !detail::is_integer_in(*it, lo, hi)) return std::nullopt;
  return it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
}

json trace_args(const json& in) {
  json out = json::object();
  if (!in.is_object()) return out;
  if (auto i = trace_integer(in, "index", 0, 1 << 30)) out["index"] = *i;
  if (auto b = trace_integer(in, "bytes", 0)) out["bytes"] = *b;
  for (const char* key : {"algorithm", "what"}) {
    auto it = in.find(key);
    if (it != in.end() && trace_text_ok(*it, 64)) out[key] = *it;
  }
  return out;
}

class TraceReader {
 public:
  explicit TraceReader(const TraceOptions& o) : o_(o) {}

  // One line of the log.
  void line(const std::string& text) {
    const json j = detail::parse_capped_or_discarded(text);
    if (!j.is_object()) {
      ++skipped_;
      return;
    }
    ++json_lines_;
    auto type = j.find("type");
    if (type == j.end() || *type != "metrics") return;
    ++metrics_;
    const auto rank = trace_integer(j, "rank", 0, (1 << 24) - 1);
    const auto step = trace_integer(j, "step", 0);
    auto tl = j.find("timeline");
    if (!rank || !step || tl == j.end() || !tl->is_object()) return;
    if (*step < o_.first_step || *step > o_.last_step) return;
    const auto t0 = tl->contains("t0") ? trace_finite((*tl)["t0"]) : std::nullopt;
    auto spans = tl->find("spans");
    if (!t0 || spans == tl->end() || !spans->is_array()) {
      ++bad_spans_;
      return;
    }
    ++timelines_;
    TraceRankClock& clock = clocks_[static_cast<int>(*rank)];
    clock.seen = true;
    if (auto off = tl->contains("clock_offset_s") ? trace_finite((*tl)["clock_offset_s"]) : std::nullopt) clock.offset_s = *off;
    if (auto err = tl->contains("clock_error_s") ? trace_finite((*tl)["clock_error_s"]) : std::nullopt) clock.error_s = *err;
    size_t n = 0;
    for (const auto& s : *spans) {
      if (++n > kTraceSpansPerRecord) break;
      if (spans_.size() >= kTraceMaxSpans) {
        capped_ = true;
        return;
      }
      if (!s.is_array() || s.size() < 4 || !trace_text_ok(s[0], 64) || !trace_text_ok(s[1], 16)) {
        ++bad_spans_;
        continue;
      }
      const auto start = trace_finite(s[2]), dur = trace_finite(s[3]);
      const std::string& cat = s[1].get_ref<const std::string&>();
      const auto c = std::find(std::begin(kTraceCats), std::end(kTraceCats), cat) - std::begin(kTraceCats);
      if (!start || !dur || *dur < 0 || *dur > 1e6 || std::fabs(*start) > 1e6 || c == 3) {
        ++bad_spans_;
        continue;
      }
      TraceSpan span;
      span.rank = static_cast<int>(*rank);
      span.cat = static_cast<int>(c);
      span.step = *step;
      span.name = s[0].get<std::string>();
      span.abs_s = *t0 + *start;
      span.dur_s = *dur;
      span.args = s.size() > 4 ? trace_args(s[4]) : json::object();
      span.args["step"] = *step;
      spans_.push_back(std::move(span));
    }
  }

  const TraceOptions& o_;
  std::vector<TraceSpan> spans_;
  std::map<int, TraceRankClock> clocks_;
  size_t skipped_ = 0, json_lines_ = 0, metrics_ = 0, timelines_ = 0, bad_spans_ = 0;
  bool capped_ = false;
};

// Reads `path` line by line with kTraceMaxLine as the cap; false with `why` when it cannot be read.
bool trace_read_lines(const std::string& path, TraceReader& reader, size_t& lines, std::string& why) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    why = std::strerror(errno);
    return false;
  }
  std::string line;
  bool too_long = false;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    for (size_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') {
        if (line.size() < kTraceMaxLine) line += buf[i];
        else too_long = true;
        continue;
      }
      if (too_long) ++reader.skipped_;
      else if (!line.empty()) reader.line(line);
      ++lines;
      line.clear();
      too_long = false;
    }
  }
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) {
    why = "a read failed";
    return false;
  }
  if (!line.empty() && !too_long) reader.line(line), ++lines;  // a last line without its newline (torn: skipped)
  return true;
}

// Lanes: spans of one rank and kind go onto the first lane where they follow or nest inside what
// is there (Chrome's complete events must nest on a thread); overlapping buckets take more lanes.
void trace_lanes(std::vector<TraceSpan>& spans) {
  std::sort(spans.begin(), spans.end(), [](const TraceSpan& a, const TraceSpan& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.cat != b.cat) return a.cat < b.cat;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;  // the outer one first
  });
  constexpr int64_t kSlackNs = 1000;  // rounding between a phase's end and the next one's start
  std::vector<std::vector<int64_t>> lanes;  // per lane: the ends of the open spans, outermost first
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i == 0 || spans[i].rank != spans[i - 1].rank || spans[i].cat != spans[i - 1].cat) lanes.clear();
    TraceSpan& s = spans[i];
    size_t lane = 0;
    for (;; ++lane) {
      if (lane == lanes.size()) lanes.emplace_back();
      auto& open = lanes[lane];
      while (!open.empty() && open.back() <= s.begin_ns + kSlackNs) {
        s.begin_ns = std::max(s.begin_ns, open.back());  // a hair of overlap from rounding: after it
        open.pop_back();
      }
      s.end_ns = std::max(s.end_ns, s.begin_ns);
      if (open.empty() || s.end_ns <= open.back()) break;
    }
    lanes[lane].push_back(s.end_ns);
    s.lane = static_cast<int>(lane);
  }
}

int trace_tid(int cat, int lane) { return 1 + cat + 3 * lane; }

double trace_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

int trace_fail(const std::string& message) {
  std::cerr << "cohort trace: error: " << message << std::endl;
  return 1;
}

}  // namespace

CLI::App* add_trace_command(CLI::App& app, TraceOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "trace", "Write a run's step timelines (every rank's spans) as a Chrome trace (Perfetto, chrome://tracing)");
  cmd->add_option("RUN_DIR", o.run_dir, "The run directory (holds events.jsonl; printed by cohort run)")->required();
  cmd->add_option("-o,--output", o.output, "The trace file to write ('-': standard output)")->capture_default_str();
  cmd->add_option("--first-step", o.first_step, "Leave out steps before this one")->check(CLI::NonNegativeNumber);
  cmd->add_option("--last-step", o.last_step, "Leave out steps after this one")->check(CLI::NonNegativeNumber);
  return cmd;
}

int run_trace_command(const TraceOptions& o) {
  struct stat st {};
  if (::stat(o.run_dir.c_str(), &st) != 0)
    return trace_fail(o.run_dir + ": " + std::strerror(errno) + " (give the run directory cohort run printed)");
  if (!S_ISDIR(st.st_mode)) return trace_fail(o.run_dir + " is not a directory (give the run directory cohort run printed)");
  const std::string log = o.run_dir + "/events.jsonl";
  if (::stat(log.c_str(), &st) != 0) return trace_fail("no event log " + log + " (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) return trace_fail(log + " is not a regular file (cohort run writes the event log as one)");
  TraceReader reader(o);
  size_t lines = 0;
  std::string why;
  if (!trace_read_lines(log, reader, lines, why)) return trace_fail("cannot read " + log + ": " + why);
  if (reader.json_lines_ == 0)
    return trace_fail(log + " is not a cohort event log (" + std::to_string(lines) + " lines, none of them a JSON object)");
  if (reader.metrics_ == 0) return trace_fail(log + " has no metrics records (not the log of a training run?)");
  if (reader.spans_.empty()) {
    if (reader.timelines_ > 0 || o.first_step > 0 || o.last_step < INT64_MAX)
      return trace_fail(log + " has no spans in the steps asked for");
    return trace_fail(log + " has no step timelines (" + std::to_string(reader.metrics_) +
                " metrics records without \"timeline\": a cohort before timelines, or COHORT_TIMELINE=0)");
  }
  auto& spans = reader.spans_;
  double origin = spans.front().abs_s;
  for (const auto& s : spans) origin = std::min(origin, s.abs_s);
  for (auto& s : spans) {
    s.begin_ns = std::llround((s.abs_s - origin) * 1e9);
    s.end_ns = s.begin_ns + std::llround(s.dur_s * 1e9);
  }
  trace_lanes(spans);

  const bool to_stdout = o.output == "-";
  const std::string tmp = o.output + ".tmp";
  std::ofstream file;
  if (!to_stdout) {
    file.open(tmp, std::ios::binary | std::ios::trunc);
    if (!file) return trace_fail("cannot write " + tmp + ": " + std::strerror(errno));
  }
  std::ostream& out = to_stdout ? std::cout : file;
  auto event = [&, first = true](const json& e) mutable {
    out << (first ? "\n" : ",\n") << detail::dump_text(e);
    first = false;
  };
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"job_clock_origin_s\":" << json(origin).dump()
      << ",\"source\":" << detail::dump_text(json(log)) << "},\"traceEvents\":[";
  std::map<int, std::set<int>> tids;  // rank → its threads
  for (const auto& s : spans) tids[s.rank].insert(trace_tid(s.cat, s.lane));
  for (const auto& [rank, threads] : tids) {
    event({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    event({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
    const TraceRankClock& c = reader.clocks_[rank];
    char label[96];
    std::snprintf(label, sizeof(label), "clock offset %+.6f s ± %.6f s", c.offset_s, c.error_s);
    event({{"ph", "M"}, {"name", "process_labels"}, {"pid", rank}, {"tid", 0}, {"args", {{"labels", label}}}});
    for (int tid : threads) {
      const int cat = (tid - 1) % 3, lane = (tid - 1) / 3;
      const std::string name = std::string(kTraceCats[cat]) + (lane ? " " + std::to_string(lane + 1) : "");
      event({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", name}}}});
      event({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    }
  }
  int64_t flow_id = 0;
  for (const auto& s : spans) {
    const int tid = trace_tid(s.cat, s.lane);
    event({{"ph", "X"}, {"name", s.name}, {"cat", kTraceCats[s.cat]}, {"pid", s.rank}, {"tid", tid},
           {"ts", trace_us(s.begin_ns)}, {"dur", trace_us(s.end_ns - s.begin_ns)}, {"args", s.args}});
    if (s.name != "bucket" || s.cat != 1) continue;
    // The bucket's launch (on the compute thread: backward, or the wait after it) to its completion.
    ++flow_id;
    const int64_t end_in = std::max(s.begin_ns, s.end_ns - std::min<int64_t>(500, (s.end_ns - s.begin_ns) / 2));
    event({{"ph", "s"}, {"name", "bucket"}, {"cat", "comm"}, {"id", flow_id}, {"pid", s.rank}, {"tid", trace_tid(0, 0)},
           {"ts", trace_us(s.begin_ns)}});
    event({{"ph", "f"}, {"bp", "e"}, {"name", "bucket"}, {"cat", "comm"}, {"id", flow_id}, {"pid", s.rank},
           {"tid", tid}, {"ts", trace_us(end_in)}});
  }
  out << "\n]}\n";
  out.flush();
  if (!out) return trace_fail("cannot write " + (to_stdout ? std::string("standard output") : tmp) + ": " + std::strerror(errno));
  if (!to_stdout) {
    file.close();
    if (std::rename(tmp.c_str(), o.output.c_str()) != 0) return trace_fail("cannot write " + o.output + ": " + std::strerror(errno));
  }
  std::cerr << "cohort trace: " << tids.size() << (tids.size() == 1 ? " rank, " : " ranks, ") << spans.size()
            << " spans of " << reader.timelines_ << " steps -> " << o.output;
  if (reader.skipped_ || reader.bad_spans_)
    std::cerr << " (left out: " << reader.skipped_ << " unreadable lines, " << reader.bad_spans_ << " malformed spans)";
  if (reader.capped_) std::cerr << "; stopped at " << kTraceMaxSpans << " spans: choose steps with --first-step/--last-step";
  std::cerr << std::endl;
  return 0;
}

}  // namespace cohort::tools
