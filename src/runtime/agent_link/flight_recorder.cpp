// The flight recorder's ring and its JSON dump. See flight_recorder.h and docs/fault-tolerance.md.
#include "flight_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "progress.h"
#include "runtime/clock/job_clock.h"

namespace cohort::detail {

const char* to_string(FlightState state) {
  switch (state) {
    case FlightState::enqueued: return "enqueued";
    case FlightState::started: return "started";
    case FlightState::completed: return "completed";
    case FlightState::failed: return "failed";
  }
  return "unknown";
}

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
thread_local const void* t_span_owner = nullptr;
}  // namespace

void set_span_owner(const void* owner) noexcept { t_span_owner = owner; }

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity == 0 ? 1 : capacity), spans_(kSpanCapacity) {}

uint64_t FlightRecorder::record(const FlightOp& op, int64_t step, FlightState state) {
  const int64_t now = wall_clock_us();
  const int64_t now_ns = own_clock_ns();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  FlightEntry& e = ring_[seq % ring_.size()];
  // An unfinished entry pushed out of the ring never reports its end: count it as ended now.
  if (e.seq != 0 && (e.state == FlightState::enqueued || e.state == FlightState::started)) account_end(e, now);
  e.seq = seq;
  e.op = op;
  e.step = step;
  e.state = state;
  e.enqueued_us = now;
  e.enqueued_ns = now_ns;
  e.owner = t_span_owner;
  e.started_us = state == FlightState::enqueued ? 0 : now;
  e.ended_us = 0;
  if (op.gradient && gradient_active_++ == 0) busy_since_us_ = now;
  if (state == FlightState::completed || state == FlightState::failed) {
    e.ended_us = now;
    account_end(e, now);
  }
  if (state == FlightState::completed) completed_.fetch_add(1, std::memory_order_relaxed);
  return seq;
}

void FlightRecorder::set_state(uint64_t seq, FlightState state) {
  if (seq == 0) return;
  const int64_t now = wall_clock_us();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq) return;  // overwritten: 64 newer collectives were recorded meanwhile
  if (e.state == FlightState::completed || e.state == FlightState::failed) return;  // final
  e.state = state;
  if (state == FlightState::started) {
    if (e.started_us == 0) e.started_us = now;
  } else if (state == FlightState::completed || state == FlightState::failed) {
    if (e.started_us == 0) e.started_us = now;
    e.ended_us = now;
    account_end(e, now);
    if (state == FlightState::completed) completed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void FlightRecorder::set_size(uint64_t seq, const char* dtype, int64_t numel, int64_t bytes) {
  if (seq == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq || e.state == FlightState::completed || e.state == FlightState::failed) return;
  e.op.dtype = dtype;
  e.op.numel = numel;
  e.op.bytes = bytes;
}

void FlightRecorder::account_end(const FlightEntry& e, int64_t now) {
  if (spans_count_ < spans_.size()) {
    CommSpan& span = spans_[spans_count_++];
    span.op = e.op;
    span.owner = e.owner;
    span.begin_ns = e.enqueued_ns;
    span.end_ns = std::max(e.enqueued_ns, own_clock_ns());
    span.failed = e.state == FlightState::failed;
  } else {
    ++spans_dropped_;
  }
  if (e.state != FlightState::failed) totals_.bytes += e.op.bytes;
  if (!e.op.gradient) return;
  if (e.state != FlightState::failed) totals_.gradient_bytes += e.op.bytes;
  if (gradient_active_ > 0 && --gradient_active_ == 0) totals_.gradient_busy_us += now - busy_since_us_;
}

CommTotals FlightRecorder::take_comm_totals() {
  const int64_t now = wall_clock_us();
  std::lock_guard<std::mutex> lock(mu_);
  CommTotals out = totals_;
  if (gradient_active_ > 0) {  // in flight across the step's end: split at now
    out.gradient_busy_us += now - busy_since_us_;
    busy_since_us_ = now;
  }
  totals_ = CommTotals{};
  return out;
}

size_t FlightRecorder::take_comm_spans(const void* owner, CommSpan* out, size_t capacity, size_t* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0, kept = 0, over = 0;
  for (size_t i = 0; i < spans_count_; ++i) {
    if (spans_[i].owner != owner && spans_[i].owner != nullptr) {
      spans_[kept++] = spans_[i];  // another rank's (ranks as threads): left for it
    } else if (n < capacity) {
      out[n++] = spans_[i];
    } else {
      ++over;
    }
  }
  if (dropped) *dropped = spans_dropped_ + over;
  spans_count_ = kept;
  spans_dropped_ = 0;
  return n;
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  out.reserve(ring_.size());
  // The oldest surviving entry is next_seq_ - size (or 1); walk forward from there.
  const uint64_t first = next_seq_ > ring_.size() ? next_seq_ - ring_.size() : 1;
  for (uint64_t seq = first; seq < next_seq_; ++seq) {
    const FlightEntry& e = ring_[seq % ring_.size()];
    if (e.seq == seq) out.push_back(e);
  }
  return out;
}

FlightEntry FlightRecorder::oldest_unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t first = next_seq_ > ring_.size() ? next_seq_ - ring_.size() : 1;
  for (uint64_t seq = first; seq < next_seq_; ++seq) {
    const FlightEntry& e = ring_[seq % ring_.size()];
    if (e.seq == seq && (e.state == FlightState::enqueued || e.state == FlightState::started)) return e;
  }
  return FlightEntry{};
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_ - 1;
}

FlightRecorder& flight_recorder() {
  static FlightRecorder* instance = new FlightRecorder();  // never destroyed: threads may record during exit
  return *instance;
}

uint64_t flight_record(const FlightOp& op, FlightState state) {
  return flight_recorder().record(op, progress().step(), state);
}

namespace {

std::string seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f s", static_cast<double>(us) / 1e6);
  return buf;
}

}  // namespace

// "#230 allreduce of ddp bucket 0 (99010 x float32, 396040 bytes, shm)"
std::string flight_entry_name(const FlightEntry& e) {
  std::string out = "#" + std::to_string(e.seq) + " " + e.op.op;
  if (*e.op.what) out += std::string(" of ") + e.op.what;
  if (e.op.index >= 0) out += " " + std::to_string(e.op.index);
  std::string details;
  if (*e.op.dtype) details = std::to_string(e.op.numel) + " x " + e.op.dtype + ", " + std::to_string(e.op.bytes) + " bytes";
  if (*e.op.backend) details += (details.empty() ? "" : ", ") + std::string(e.op.backend);
  return details.empty() ? out : out + " (" + details + ")";
}

// "... : started 3.412 s ago, not completed" / "... : completed in 0.812 ms, 3.500 s ago"
namespace {

std::string account_of(const FlightEntry& e, int64_t now_us) {
  std::string out = flight_entry_name(e) + ": ";
  switch (e.state) {
    case FlightState::enqueued: return out + "enqueued " + seconds(now_us - e.enqueued_us) + " ago, not started";
    case FlightState::started: return out + "started " + seconds(now_us - e.started_us) + " ago, not completed";
    case FlightState::completed:
    case FlightState::failed:
      return out + to_string(e.state) + " in " + seconds(e.ended_us - e.enqueued_us) + ", " +
             seconds(now_us - e.ended_us) + " ago";
  }
  return out;
}

nlohmann::json entry_json(const FlightEntry& e, int64_t now_us) {
  nlohmann::json j = {{"seq", e.seq},         {"op", e.op.op},       {"what", e.op.what},
                      {"index", e.op.index},  {"backend", e.op.backend}, {"dtype", e.op.dtype},
                      {"numel", e.op.numel},  {"bytes", e.op.bytes}, {"step", e.step},
                      {"state", to_string(e.state)}, {"enqueued_us", e.enqueued_us}};
  j["started_us"] = e.started_us ? nlohmann::json(e.started_us) : nlohmann::json(nullptr);
  j["ended_us"] = e.ended_us ? nlohmann::json(e.ended_us) : nlohmann::json(nullptr);
  j["age_s"] = static_cast<double>(now_us - e.enqueued_us) / 1e6;
  return j;
}

}  // namespace

std::string flight_record_json(const FlightDumpInfo& info, const std::vector<FlightEntry>& entries, int64_t now_us) {
  const FlightEntry* waiting = nullptr;         // the oldest collective not finished
  const FlightEntry* last_completed = nullptr;  // the newest completed one
  const FlightEntry* last_failed = nullptr;
  for (const auto& e : entries) {
    if (!waiting && (e.state == FlightState::enqueued || e.state == FlightState::started)) waiting = &e;
    if (e.state == FlightState::completed) last_completed = &e;
    if (e.state == FlightState::failed) last_failed = &e;
  }
  auto text = [&](const FlightEntry* e) { return e ? nlohmann::json(account_of(*e, now_us)) : nlohmann::json(nullptr); };
  nlohmann::ordered_json head = {
      {"format", "cohort-flight-record"},
      {"version", 1},
      {"rank", info.rank},
      {"world_size", info.world_size},
      {"local_rank", info.local_rank},
      {"node_rank", info.node_rank},
      {"restart_count", info.restart_count},
      {"pid", info.pid},
      {"reason", info.reason},
      {"dumped_at_us", now_us},
      {"step", info.step},
      {"reported_step", info.reported_step},
      {"ddp_iterations", info.ddp_iterations},
      {"waiting_in_seq", waiting ? nlohmann::json(waiting->seq) : nlohmann::json(nullptr)},
      {"waiting_in", text(waiting)},
      {"last_completed_seq", last_completed ? nlohmann::json(last_completed->seq) : nlohmann::json(nullptr)},
      {"last_completed", text(last_completed)},
      {"last_failed", text(last_failed)},
  };
  // One field a line, one entry a line: readable with `less`, parseable with anything.
  std::string out = "{\n";
  for (auto it = head.begin(); it != head.end(); ++it) {
    out += "  " + nlohmann::json(it.key()).dump() + ": " + it.value().dump() + ",\n";
  }
  out += "  \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    out += (i ? ",\n    " : "\n    ") + entry_json(entries[i], now_us).dump();
  }
  out += entries.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace cohort::detail
