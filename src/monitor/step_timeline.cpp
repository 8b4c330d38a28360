// The step's spans: recording and their JSON. See step_timeline.h.
#include "step_timeline.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/clock/job_clock.h"
#include "worker_monitor.h"

namespace cohort::detail {
namespace {

const char* algorithm_of(const char* backend) {
  if (std::strcmp(backend, "gloo") == 0) return "ring";  // Gloo's allreduce: its ring algorithm
  return backend;                                       // "shm", "nccl" (NCCL picks ring or tree)
}

const char* comm_span_name(const FlightOp& op) {
  if (op.gradient) return "bucket";
  if (std::strcmp(op.op, "send") == 0) return "send";
  if (std::strcmp(op.op, "recv") == 0) return "recv";
  return op.op;  // "allgather", "broadcast", "barrier", ...
}

void timeline_quoted(std::string& out, const char* s) {
  out += '"';
  for (const char* c = s; *c; ++c) {
    if (*c == '"' || *c == '\\') out += '\\';
    if (static_cast<unsigned char>(*c) >= 0x20 && static_cast<unsigned char>(*c) < 0x80) out += *c;
  }
  out += '"';
}

}  // namespace

StepTimelineRecorder::StepTimelineRecorder() : comm_(new CommSpan[kMaxTimelineSpans]) {}

void StepTimelineRecorder::add_span(const char* name, const char* cat, int64_t begin, int64_t end,
                                    int64_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (other_count_ >= kMaxOther) {
    other_dropped_ = true;
    return;
  }
  other_[other_count_++] = OtherSpan{name, cat, begin, std::max(begin, end), bytes};
}

void StepTimelineRecorder::take(const void* owner, int64_t start_ns, bool with_phases, StepTimeline& out) {
  out.spans.clear();
  out.spans.reserve(kMaxTimelineSpans);
  out.truncated = false;
  const ClockOffset clock = clock_offset();
  out.clock_offset_s = clock.offset_s;
  out.clock_error_s = clock.error_s;
  out.t0 = job_seconds(start_ns);
  auto seconds = [start_ns](int64_t ns) { return static_cast<double>(ns - start_ns) / 1e9; };
  auto push = [&](TimelineSpan span) {
    if (out.spans.size() >= static_cast<size_t>(kMaxTimelineSpans)) {
      out.truncated = true;
      return;
    }
    out.spans.push_back(span);
  };
  const int phases = phase_count_.load(std::memory_order_relaxed);
  if (with_phases) {
    for (int i = 0; i < phases; ++i) {
      TimelineSpan s;
      s.name = to_string(static_cast<Phase>(phases_[i].phase));
      s.cat = "compute";
      s.start_s = seconds(phases_[i].begin);
      s.dur_s = static_cast<double>(std::max<int64_t>(0, phases_[i].end - phases_[i].begin)) / 1e9;
      push(s);
    }
    if (phases_truncated_.load(std::memory_order_relaxed)) out.truncated = true;
  }
  phase_count_.store(0, std::memory_order_relaxed);
  phases_truncated_.store(false, std::memory_order_relaxed);

  size_t dropped = 0;
  const size_t comms = flight_recorder().take_comm_spans(owner, comm_.get(), kMaxTimelineSpans, &dropped);
  if (dropped) out.truncated = true;
  for (size_t i = 0; i < comms; ++i) {
    const CommSpan& c = comm_[i];
    TimelineSpan s;
    s.name = comm_span_name(c.op);
    s.cat = "comm";
    s.start_s = seconds(c.begin_ns);
    s.dur_s = static_cast<double>(c.end_ns - c.begin_ns) / 1e9;
    s.index = c.op.index;
    s.bytes = c.op.bytes;
    s.algorithm = algorithm_of(c.op.backend);
    s.what = c.op.what;
    push(s);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < other_count_; ++i) {
    TimelineSpan s;
    s.name = other_[i].name;
    s.cat = other_[i].cat;
    s.start_s = seconds(other_[i].begin);
    s.dur_s = static_cast<double>(other_[i].end - other_[i].begin) / 1e9;
    s.bytes = other_[i].bytes;
    push(s);
  }
  if (other_dropped_) out.truncated = true;
  other_count_ = 0;
  other_dropped_ = false;
}

void append_timeline_json(std::string& out, const StepTimeline& t) {
  out += "{\"t0\":";
  append_json_number(out, t.t0);
  out += ",\"clock_offset_s\":";
  append_json_number(out, t.clock_offset_s);
  out += ",\"clock_error_s\":";
  append_json_number(out, t.clock_error_s);
  if (t.truncated) out += ",\"truncated\":true";
  out += ",\"spans\":[";
  for (size_t i = 0; i < t.spans.size(); ++i) {
    const TimelineSpan& s = t.spans[i];
    if (i) out += ',';
    out += '[';
    timeline_quoted(out, s.name);
    out += ',';
    timeline_quoted(out, s.cat);
    out += ',';
    append_json_number(out, s.start_s);
    out += ',';
    append_json_number(out, s.dur_s);
    out += ',';
    const bool collective = std::strcmp(s.cat, "comm") == 0;
    if (!collective && s.bytes < 0) {
      out += "null]";
      continue;
    }
    out += '{';
    bool first = true;
    auto key = [&](const char* k) {
      if (!first) out += ',';
      first = false;
      out += '"';
      out += k;
      out += "\":";
    };
    if (collective && s.index >= 0) key("index"), out += std::to_string(s.index);
    if (s.bytes >= 0) key("bytes"), out += std::to_string(s.bytes);
    if (collective) key("algorithm"), timeline_quoted(out, s.algorithm);
    if (collective && *s.what) key("what"), timeline_quoted(out, s.what);
    out += "}]";
  }
  out += "]}";
}

}  // namespace cohort::detail
