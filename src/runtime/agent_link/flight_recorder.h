// runtime/agent_link/flight_recorder.h — this process's last collectives, kept for a post-mortem.
//
// Every collective cohort issues itself (DDP buckets, the model check's allgather, broadcasts,
// barriers, the shared-memory allreduce, the pipeline's sends and receives) takes one entry in a
// fixed ring of the last `capacity` (64): sequence number, operation, what it is for, size, dtype,
// backend, state and wall-clock times. Recording locks a mutex and copies a few words — no
// allocation, no formatting: names are static string literals. When the agent asks (a hang, see
// agent_link.h) the ring is written out as JSON (flight_record_json), the format of
// docs/fault-tolerance.md.
//
// Sequence numbers count the recorded collectives of the process from 1. Ranks that issue the same
// collectives in the same order — DDP does, by construction — give the same collective the same
// number, so the dumps of all ranks line up: "everyone waits in #230; rank 1 completed #229".
// Not seen here: collectives a program issues on ctx->group() itself.
// The monitor (cohort/monitor.h) takes from it, per step, the bytes of completed collectives and
// the time during which a gradient reduction was in flight (CommTotals): a few words under the
// same mutex. And the timeline (docs/monitoring.md#the-timeline-panel): each collective that ends leaves a
// span (its operation, enqueue and end on the job clock's own-clock nanoseconds) in a fixed buffer
// of kSpanCapacity that the monitor drains at each step (take_comm_spans); what does not fit until
// then is counted, not kept. A span belongs to the thread's span owner at the collective's record
// (set_span_owner: the monitor of the training thread that issued it), so that ranks run as
// threads of one process each take their own; spans without an owner go to whoever takes first.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace cohort::detail {

enum class FlightState : uint8_t {
  enqueued,   // handed to the backend (asynchronous), not begun as far as cohort can tell
  started,    // the engine began it (shared-memory thread), or this rank began waiting for it (Gloo)
  completed,
  failed,     // threw (timeout, a peer died)
};
const char* to_string(FlightState state);

/// What a collective is; every string is a static literal (the ring stores the pointers).
struct FlightOp {
  const char* op = "";       // "allreduce", "broadcast", "allgather", "barrier"
  const char* what = "";     // what it is for: "ddp bucket", "model check", ...; may be empty
  int32_t index = -1;        // bucket or chunk number; -1: none
  const char* backend = "";  // "gloo", "nccl", "shm"
  const char* dtype = "";    // "Float", ... (c10's names); empty: no data (a barrier)
  int64_t numel = 0;
  int64_t bytes = 0;
  bool gradient = false;     // a gradient reduction: its time counts as the step's comm_s (monitor)
};

/// What completed since the last take_comm_totals() (the monitor's per-step comm figures).
struct CommTotals {
  int64_t bytes = 0;          // every completed collective's bytes
  int64_t gradient_bytes = 0; // those of gradient reductions
  int64_t gradient_busy_us = 0;  // time with at least one gradient reduction in flight (enqueued → ended)
};

struct FlightEntry {
  uint64_t seq = 0;  // 0: an empty slot
  FlightOp op;
  int64_t step = 0;  // the process's step (progress.h) when it was recorded
  FlightState state = FlightState::enqueued;
  int64_t enqueued_us = 0, started_us = 0, ended_us = 0;  // µs since the Unix epoch; 0: not (yet)
  const void* owner = nullptr;  // the recording thread's span owner (set_span_owner)
  int64_t enqueued_ns = 0;  // own clock (runtime/clock/job_clock.h): the timeline's span begins here
};

/// A collective that ended: the timeline's span of it (own-clock nanoseconds, job_clock.h).
struct CommSpan {
  FlightOp op;
  const void* owner = nullptr;
  int64_t begin_ns = 0, end_ns = 0;
  bool failed = false;
};

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 64;
  explicit FlightRecorder(size_t capacity = kDefaultCapacity);

  /// Records a new collective in `state` (enqueued, or started for a blocking call); returns its
  /// sequence number.
  uint64_t record(const FlightOp& op, int64_t step, FlightState state = FlightState::enqueued);
  /// Moves entry `seq` on. Ignored when seq is 0 or the ring has since overwritten the entry.
  void set_state(uint64_t seq, FlightState state);
  /// Gives entry `seq` its size once known (a receive learns it from a header); the same rules.
  void set_size(uint64_t seq, const char* dtype, int64_t numel, int64_t bytes);

  /// The entries still in the ring, oldest first.
  std::vector<FlightEntry> snapshot() const;
  /// The oldest entry neither completed nor failed (what this rank waits in); seq 0 when none.
  FlightEntry oldest_unfinished() const;
  /// Collectives recorded so far, and those that completed (the agent's progress counter).
  uint64_t recorded() const;
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  /// Takes (and resets) the totals since the last call. Consumed, not copied: with ranks as
  /// threads of one process, each completion is counted by whichever rank's monitor takes it first.
  CommTotals take_comm_totals();
  /// Moves the spans of `owner` (and those of none) ended since the last call into `out` (at most
  /// `capacity`, oldest first; the rest of them are dropped and counted in `*dropped`). Returns how many.
  size_t take_comm_spans(const void* owner, CommSpan* out, size_t capacity, size_t* dropped = nullptr);
  static constexpr size_t kSpanCapacity = 256;

 private:
  void account_end(const FlightEntry& e, int64_t now);  // mu_ held
  CommTotals totals_;          // mu_
  int64_t gradient_active_ = 0;   // gradient reductions enqueued and not ended
  int64_t busy_since_us_ = 0;     // when gradient_active_ last became non-zero
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  std::vector<CommSpan> spans_;  // kSpanCapacity slots, spans_count_ used (mu_)
  size_t spans_count_ = 0;
  size_t spans_dropped_ = 0;
  uint64_t next_seq_ = 1;
  std::atomic<uint64_t> completed_{0};
};

/// The calling thread's span owner from now on (the monitor's marks set theirs; null: none).
void set_span_owner(const void* owner) noexcept;

/// This process's recorder (all of cohort's call sites record here).
FlightRecorder& flight_recorder();

/// Records `op` in this process's recorder, stamped with the current step.
uint64_t flight_record(const FlightOp& op, FlightState state = FlightState::enqueued);
inline void flight_update(uint64_t seq, FlightState state) { flight_recorder().set_state(seq, state); }

/// A blocking collective's entry: started on construction, failed unless done() was called (an
/// exception unwinds through it).
class FlightScope {
 public:
  explicit FlightScope(const FlightOp& op) : seq_(flight_record(op, FlightState::started)) {}
  ~FlightScope() { flight_update(seq_, done_ ? FlightState::completed : FlightState::failed); }
  FlightScope(const FlightScope&) = delete;
  FlightScope& operator=(const FlightScope&) = delete;
  void done() { done_ = true; }
  uint64_t seq() const { return seq_; }

 private:
  uint64_t seq_;
  bool done_ = false;
};

/// Who dumps, and why; the header of a dump.
struct FlightDumpInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int node_rank = 0;
  int restart_count = 0;
  int64_t pid = 0;
  int64_t step = 0;             // the step counter (progress.h)
  int64_t reported_step = -1;   // the last cohort::report_step() value, -1: never called
  int64_t ddp_iterations = 0;
  std::string reason;           // from the agent's request
};

/// The dump as JSON (docs/fault-tolerance.md): a header, a one-line account of the collective
/// this rank waits in and of its last completed one, then every entry, oldest first, one a line.
std::string flight_record_json(const FlightDumpInfo& info, const std::vector<FlightEntry>& entries, int64_t now_us);

/// "#230 allreduce of ddp bucket 0 (99010 x Float, 396040 bytes, shm)", "#7 barrier (gloo)"
std::string flight_entry_name(const FlightEntry& entry);

/// Microseconds since the Unix epoch (the entries' clock).
int64_t wall_clock_us();

}  // namespace cohort::detail
