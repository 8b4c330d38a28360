// ShmAllreduce — see shm_allreduce.h for the algorithm.
#include "shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>
#include <signal.h>

#include "cohort/error.h"
#include "runtime/duration_text.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/flight_op.h"
#include "runtime/log.h"
#include "runtime/check.h"

namespace cohort::detail {

struct ShmAllreduce::Control {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;  // bumped by the last rank to arrive; waiters sleep on it
  std::atomic<int32_t> pid[kMaxWatchedRanks];  // each rank's process, so waiters notice a death
};

namespace {

constexpr size_t kControlBytes = 4096;
static_assert(2 * sizeof(uint32_t) + ShmAllreduce::kMaxWatchedRanks * sizeof(int32_t) <= kControlBytes);

// A process that no longer runs, or is a zombie nobody has reaped yet.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string skip, state;
  // pid (comm) state ...; comm has no spaces for our programs, and a read failure means "not gone".
  if (!(stat >> skip >> skip >> state)) return false;
  return state == "Z" || state == "X";
}

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected, long nanos) {
  timespec ts{0, nanos};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}


}  // namespace

void ShmPending::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool ShmAllreduce::supports(const at::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() && !t.is_sparse() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(int rank, int world, bool eligible,
                                                   const c10::intrusive_ptr<c10d::Store>& store,
                                                   std::chrono::milliseconds timeout, size_t slot_bytes) {
  // Store keys count ranks in; this waits until `key` reaches `world`.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto wait_for_all = [&](const std::string& key) {
    while (store->add(key, 0) < world) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError(rank, "not every rank set up the shared-memory allreduce within " + seconds_text(timeout));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // The ranks decide together: each one's view of the job (its local world) may differ, and a
  // rank that waits for a segment the others never make would hang.
  if (!eligible) store->add("cohort/shm/ineligible", 1);
  store->add("cohort/shm/voted", 1);
  wait_for_all("cohort/shm/voted");
  if (store->add("cohort/shm/ineligible", 0) > 0) return nullptr;

  slot_bytes = (slot_bytes + 63) / 64 * 64;  // keep slots cache-line aligned
  const size_t bytes = kControlBytes + 2 * static_cast<size_t>(world) * slot_bytes;
  // Rank 0 creates the segment and publishes its name, or an empty name when it could not.
  std::string name;
  if (rank == 0) {
    static std::atomic<int> segments{0};  // several jobs in one process (tests run ranks as threads)
    name = "/cohort-" + std::to_string(::getpid()) + "-" + std::to_string(segments++);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate reserves the pages now: on a full /dev/shm we fail here, not with SIGBUS later.
    if (fd < 0 || posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
      log_warn("shared-memory allreduce unavailable (" + std::string(std::strerror(errno)) + " for " +
               std::to_string(bytes >> 20) + " MiB in /dev/shm); using the process group");
      if (fd >= 0) {
        close(fd);
        shm_unlink(name.c_str());
      }
      name.clear();
    } else {
      close(fd);
    }
    store->set("cohort/shm/name", std::vector<uint8_t>(name.begin(), name.end()));
  } else {
    auto v = store->get("cohort/shm/name");
    name.assign(v.begin(), v.end());
  }
  void* base = MAP_FAILED;
  if (!name.empty()) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0) {
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    }
  }
  // Everyone reports; the name is unlinked once all have mapped it, so nothing is left in
  // /dev/shm even if the job dies later.
  const bool ok = base != MAP_FAILED;
  store->add(ok ? "cohort/shm/mapped" : "cohort/shm/failed", 1);
  store->add("cohort/shm/done", 1);
  wait_for_all("cohort/shm/done");
  const bool all_ok = !name.empty() && store->add("cohort/shm/failed", 0) == 0;
  if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (!all_ok) {
    if (ok) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(rank, world, base, bytes, slot_bytes, timeout));
}

ShmAllreduce::ShmAllreduce(int rank, int world, void* base, size_t bytes, size_t slot_bytes,
                           std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), base_(base), bytes_(bytes), slot_bytes_(slot_bytes), timeout_(timeout) {
  control_ = static_cast<Control*>(base_);  // zero-filled by posix_fallocate: counters start at 0
  buffers_ = static_cast<unsigned char*>(base_) + kControlBytes;
  if (rank_ < kMaxWatchedRanks) control_->pid[rank_].store(static_cast<int32_t>(::getpid()));
  seen_alive_.assign(static_cast<size_t>(world_), false);
  rejoin_seen_ = newest_rejoin_generation();
  thread_ = std::thread([this] { run(); });
}

ShmAllreduce::~ShmAllreduce() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  munmap(base_, bytes_);
}

std::shared_ptr<ShmPending> ShmAllreduce::allreduce_async(at::Tensor t, double scale, const char* what,
                                                         int32_t index, bool gradient) {
  FlightOp entry = flight_op("allreduce", what, index, t, "shm");
  entry.gradient = gradient;
  Op op;
  op.flight_seq = flight_record(entry);
  op.tensor = std::move(t);
  op.scale = scale;
  return submit(std::move(op));
}

std::shared_ptr<ShmPending> ShmAllreduce::allgather_async(at::Tensor full, const char* what, int32_t index) {
  COHORT_CHECK(supports(full) && full.numel() % world_ == 0,
               "rank " << rank_ << ": shared-memory allgather needs a contiguous CPU float/double tensor whose size ("
                       << full.numel() << ") divides by the world size (" << world_ << ")");
  Op op;
  op.flight_seq = flight_record(flight_op("allgather", what, index, full, "shm"));
  op.tensor = std::move(full);
  op.gather = true;
  return submit(std::move(op));
}

std::shared_ptr<ShmPending> ShmAllreduce::reduce_scatter_async(at::Tensor flat, at::Tensor out, double scale,
                                                              const char* what, int32_t index, bool gradient) {
  COHORT_CHECK(supports(flat) && supports(out) && flat.scalar_type() == out.scalar_type() &&
                   flat.numel() == out.numel() * world_ && slot_bytes_ >= static_cast<size_t>(world_) * flat.element_size(),
               "rank " << rank_ << ": shared-memory reduce-scatter of " << flat.numel() << " elements into "
                       << out.numel() << " at world size " << world_ << " (slot " << slot_bytes_ << " bytes)");
  FlightOp entry = flight_op("reduce_scatter", what, index, flat, "shm");
  entry.gradient = gradient;
  Op op;
  op.flight_seq = flight_record(entry);
  op.tensor = std::move(flat);
  op.scale = scale;
  op.out = std::move(out);
  return submit(std::move(op));
}

std::shared_ptr<ShmPending> ShmAllreduce::submit(Op op) {
  op.pending = std::make_shared<ShmPending>();
  std::shared_ptr<ShmPending> pending = op.pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
  return pending;
}

void ShmAllreduce::run() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error = broken_;
    flight_update(op.flight_seq, FlightState::started);
    if (!error) {
      try {
        allreduce_now(op);
      } catch (...) {
        error = broken_ = std::current_exception();
      }
    }
    flight_update(op.flight_seq, error ? FlightState::failed : FlightState::completed);
    {
      std::lock_guard<std::mutex> lock(op.pending->mu_);
      op.pending->done_ = true;
      op.pending->error_ = error;
    }
    op.pending->cv_.notify_all();
  }
}

void ShmAllreduce::allreduce_now(Op& op) {
  at::Tensor& t = op.tensor;
  if (op.gather) {
    allgather_bytes(static_cast<unsigned char*>(t.data_ptr()), t.nbytes() / static_cast<size_t>(world_));
    return;
  }
  if (op.out.defined()) {
    const size_t part = static_cast<size_t>(op.out.numel());
    if (t.scalar_type() == at::kFloat) {
      reduce_scatter_typed(t.data_ptr<float>(), op.out.data_ptr<float>(), part, static_cast<float>(op.scale));
    } else {
      reduce_scatter_typed(t.data_ptr<double>(), op.out.data_ptr<double>(), part, op.scale);
    }
    return;
  }
  if (t.scalar_type() == at::kFloat) {
    allreduce_typed(t.data_ptr<float>(), static_cast<size_t>(t.numel()), static_cast<float>(op.scale));
  } else {
    allreduce_typed(t.data_ptr<double>(), static_cast<size_t>(t.numel()), op.scale);
  }
}

template <typename T>
void ShmAllreduce::allreduce_typed(T* data, size_t n, T scale) {
  const size_t chunk = slot_bytes_ / sizeof(T);
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t len = std::min(chunk, n - begin);
    unsigned char* buffer = buffers_ + (chunk_counter_++ % 2) * world_ * slot_bytes_;
    auto slot = [&](int k) { return reinterpret_cast<T*>(buffer + static_cast<size_t>(k) * slot_bytes_); };
    // Segment k of this chunk: [seg_begin(k), seg_begin(k+1)).
    auto seg_begin = [&](int k) { return len * static_cast<size_t>(k) / static_cast<size_t>(world_); };

    std::memcpy(slot(rank_), data + begin, len * sizeof(T));
    barrier();
    // Sum segment rank_ over the slots in rank order (the same order on every machine and run),
    // block by block through a small buffer so the loops vectorise.
    const size_t s0 = seg_begin(rank_), s1 = seg_begin(rank_ + 1);
    constexpr size_t kBlock = 2048;
    T acc[kBlock];
    for (size_t i0 = s0; i0 < s1; i0 += kBlock) {
      const size_t m = std::min(kBlock, s1 - i0);
      std::memcpy(acc, slot(0) + i0, m * sizeof(T));
      for (int k = 1; k < world_; ++k) {
        const T* other = slot(k) + i0;
        for (size_t j = 0; j < m; ++j) acc[j] += other[j];
      }
      if (scale != T(1)) {
        for (size_t j = 0; j < m; ++j) acc[j] *= scale;
      }
      std::memcpy(slot(rank_) + i0, acc, m * sizeof(T));
    }
    barrier();
    for (int k = 0; k < world_; ++k) {
      const size_t a = seg_begin(k), b = seg_begin(k + 1);
      std::memcpy(data + begin + a, slot(k) + a, (b - a) * sizeof(T));
    }
  }
}

// See the header: one barrier a chunk. Double buffering covers the reuse of a buffer as it does for
// the allreduce (a chunk's slots are read only between its barrier and the next chunk's).
void ShmAllreduce::allgather_bytes(unsigned char* data, size_t part_bytes) {
  for (size_t begin = 0; begin < part_bytes; begin += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, part_bytes - begin);
    unsigned char* buffer = buffers_ + (chunk_counter_++ % 2) * world_ * slot_bytes_;
    auto slot = [&](int k) { return buffer + static_cast<size_t>(k) * slot_bytes_; };
    auto part = [&](int k) { return data + static_cast<size_t>(k) * part_bytes + begin; };
    std::memcpy(slot(rank_), part(rank_), len);
    barrier();
    for (int k = 0; k < world_; ++k)
      if (k != rank_) std::memcpy(part(k), slot(k), len);
  }
}

// See the header. `out` may be data's own part: a chunk writes out[begin, begin + len) only after
// copying that range into the slot, and later chunks read only ranges beyond it.
template <typename T>
void ShmAllreduce::reduce_scatter_typed(const T* data, T* out, size_t part, T scale) {
  const size_t piece = slot_bytes_ / sizeof(T) / static_cast<size_t>(world_);  // of each rank's part, per chunk
  for (size_t begin = 0; begin < part; begin += piece) {
    const size_t len = std::min(piece, part - begin);
    unsigned char* buffer = buffers_ + (chunk_counter_++ % 2) * world_ * slot_bytes_;
    auto slot = [&](int k) { return reinterpret_cast<T*>(buffer + static_cast<size_t>(k) * slot_bytes_); };
    for (int k = 0; k < world_; ++k)
      std::memcpy(slot(rank_) + k * piece, data + static_cast<size_t>(k) * part + begin, len * sizeof(T));
    barrier();
    // As allreduce_typed sums a segment: slot 0, then slots 1.. in rank order, then the scale.
    constexpr size_t kBlock = 2048;
    T acc[kBlock];
    const size_t mine = static_cast<size_t>(rank_) * piece;
    for (size_t i0 = 0; i0 < len; i0 += kBlock) {
      const size_t m = std::min(kBlock, len - i0);
      std::memcpy(acc, slot(0) + mine + i0, m * sizeof(T));
      for (int k = 1; k < world_; ++k) {
        const T* other = slot(k) + mine + i0;
        for (size_t j = 0; j < m; ++j) acc[j] += other[j];
      }
      if (scale != T(1)) {
        for (size_t j = 0; j < m; ++j) acc[j] *= scale;
      }
      std::memcpy(out + begin + i0, acc, m * sizeof(T));
    }
  }
}

void ShmAllreduce::barrier() {
  const uint32_t gen = control_->generation.load(std::memory_order_acquire);
  if (control_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(world_)) {
    control_->arrived.store(0, std::memory_order_relaxed);
    control_->generation.fetch_add(1, std::memory_order_release);
    futex_wake_all(&control_->generation);
    return;
  }
  for (int spin = 0; spin < 2000; ++spin) {
    if (control_->generation.load(std::memory_order_acquire) != gen) return;
    __builtin_ia32_pause();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (control_->generation.load(std::memory_order_acquire) == gen) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw CommError(rank_, "shared-memory allreduce: not every rank arrived within " + seconds_text(timeout_) +
                                 "; a peer may have died or hung");
    }
    futex_wait(&control_->generation, gen, 50'000'000);  // 50 ms, then re-check deadline and peers
    check_peers_alive();
    if (newest_rejoin_generation() > rejoin_seen_) {
      throw CommError(rank_, "shared-memory allreduce: the job re-forms around a replaced peer; leaving this "
                             "operation, whose peers left for the new process groups");
    }
  }
}

// A dead peer never arrives: say so now instead of at the timeout. A peer counts as dead only if
// it was seen alive before (in another PID namespace its pid is never visible, so never "dead").
void ShmAllreduce::check_peers_alive() {
  for (int k = 0; k < std::min(world_, kMaxWatchedRanks); ++k) {
    const pid_t pid = control_->pid[k].load(std::memory_order_relaxed);
    if (k == rank_ || pid <= 0) continue;
    const bool gone = process_gone(pid);
    if (!gone) {
      seen_alive_[k] = true;
    } else if (seen_alive_[k]) {
      throw CommError(rank_, "shared-memory allreduce: rank " + std::to_string(k) + " (pid " + std::to_string(pid) +
                                 ") died; stopping instead of waiting for it");
    }
  }
}

}  // namespace cohort::detail
