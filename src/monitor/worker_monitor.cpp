// cohort::Monitor and its inside, StepMonitor: phase clock, NaN policy, step records, and the
// messages to the agent. See cohort/monitor.h and worker_monitor.h.
#include "worker_monitor.h"

#include <fcntl.h>
#include <time.h>  // clock_gettime(CLOCK_PROCESS_CPUTIME_ID): the step's CPU time
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cohort/error.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/flight_recorder.h"
#include "runtime/clock/job_clock.h"
#include "runtime/json_fields.h"
#include "runtime/log.h"

#if defined(USE_C10D_NCCL) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <c10/cuda/CUDACachingAllocator.h>
#define COHORT_CUDA_MEMORY_STATS 1
#endif
#endif

namespace cohort {
namespace detail {
namespace {

// The process's CPU time, all threads (one clock_gettime a step).
int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The timeline's own clock (steady_clock, plus a test's shift: runtime/clock/job_clock.h).
int64_t steady_ns() { return own_clock_ns(); }

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Bytes the CUDA caching allocator holds allocated on `device`; nullopt where unknown.
std::optional<int64_t> cuda_allocated_bytes(int device) {
#ifdef COHORT_CUDA_MEMORY_STATS
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    return static_cast<int64_t>(stats.allocated_bytes[0].current);  // [0]: all pools (StatType::AGGREGATE)
  } catch (const std::exception&) {
    return std::nullopt;
  }
#else
  (void)device;
  return std::nullopt;  // a libtorch without CUDA (or 1.x): not measured
#endif
}

const char* non_finite_name(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

// A JSON value for the events, where nlohmann would write null for a non-finite double.
nlohmann::json json_value(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(non_finite_name(v)); }

}  // namespace

// --- StepMonitor ---------------------------------------------------------------------------------

StepMonitor::StepMonitor(const MonitorOptions& options)
    : created_ns_(steady_ns()), last_cpu_ns_(process_cpu_ns()), timeline_on_(timeline_from_env()) {
  identity_.pid = ::getpid();
  configure(options);
}

void StepMonitor::configure(const MonitorOptions& options) {
  enabled_.store(options.enabled);
  grad_norm_.store(options.grad_norm);
  on_nan_.store(static_cast<int>(options.on_nan));
}

MonitorOptions StepMonitor::options() const {
  MonitorOptions o;
  o.enabled = enabled_.load();
  o.grad_norm = grad_norm_.load();
  o.on_nan = static_cast<OnNan>(on_nan_.load());
  return o;
}

void StepMonitor::set_identity(int rank, int world_size, int restart_count) {
  std::lock_guard<std::mutex> lock(mu_);
  identity_.rank = rank;
  identity_.world_size = world_size;
  identity_.restart_count = restart_count;
  identity_set_ = true;
}

WorkerIdentity StepMonitor::identity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return identity_locked();
}

WorkerIdentity StepMonitor::identity_locked() const {
  if (identity_set_) return identity_;
  WorkerIdentity who = process_identity().value_or(identity_);
  who.pid = identity_.pid;  // this process's, also before init()
  return who;
}

void StepMonitor::mark(Phase next) noexcept {
  if (!enabled()) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  const int64_t now = steady_ns();
  const int64_t last = last_ns_.load(relaxed);
  const int current = current_.load(relaxed);
  if (last == 0) {
    step_start_ns_.store(now, relaxed);  // the clock starts at the first mark
  } else if (current >= 0) {
    acc_ns_[current].store(acc_ns_[current].load(relaxed) + (now - last), relaxed);
    if (timeline_on_) timeline_.phase_span(current, last, now);
  }
  set_span_owner(this);  // the collectives this thread issues next are this monitor's
  const int n = static_cast<int>(next);
  mask_.store(mask_.load(relaxed) | (1u << n), relaxed);
  current_.store(n, relaxed);
  last_ns_.store(now, relaxed);
}

bool StepMonitor::timeline_from_env() {
  const char* on = std::getenv("COHORT_TIMELINE");
  return !(on && std::string(on) == "0");
}

void StepMonitor::add_span(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, int64_t bytes) {
  if (enabled() && timeline_on_) timeline_.add_span(name, cat, begin_ns, end_ns, bytes);
}

void StepMonitor::anomaly(const char* what, double value, int rank, int64_t step) {
  const OnNan policy = static_cast<OnNan>(on_nan_.load());
  const std::string kind = non_finite_name(value);
  const std::string subject = std::strcmp(what, "loss") == 0 ? "loss" : "gradient norm";
  std::string message = "non-finite " + subject + " (" + kind + ") at step " + std::to_string(step);
  switch (policy) {
    case OnNan::stop: message += "; stopping (on_nan=stop, see docs/monitoring.md)"; break;
    case OnNan::skip:
      message += std::strcmp(what, "loss") == 0 ? "; reported (on_nan=skip skips steps with non-finite gradients)"
                                                : "; skipping the step (on_nan=skip)";
      break;
    case OnNan::warn: message += "; continuing (on_nan=warn)"; break;
  }
  nlohmann::json fields = {{"anomaly", "nan"}, {"policy", to_string(policy)}, {"what", what}, {"value", json_value(value)}};
  // The event's own fields (spec: "anomaly", "policy", "what" next to "kind") and the same in "fields".
  nlohmann::json extra = fields;
  send_event("anomaly", step, "rank " + std::to_string(rank) + ": " + message, extra.dump());
  if (policy == OnNan::stop) throw AnomalyError(rank, message);
  if (warnings_.fetch_add(1) < 10) log_warn(message);  // the logger names the rank
}

bool StepMonitor::check_grad_norm(double norm, int rank) {
  grad_norm_value_.store(norm, std::memory_order_relaxed);
  has_grad_norm_.store(true, std::memory_order_relaxed);
  if (std::isfinite(norm)) return false;
  grad_anomaly_sent_.store(true);
  anomaly("grad_norm", norm, rank, current_step() + 1);  // throws for stop
  if (static_cast<OnNan>(on_nan_.load()) != OnNan::skip) return false;
  if (!skipped_.exchange(true)) skipped_total_.fetch_add(1);
  return true;
}

int64_t StepMonitor::rss_bytes() {
  // mu_ held. /proc/self/statm costs a few µs: read at most every 0.5 s.
  const int64_t now = steady_ns();
  if (rss_read_ns_ != 0 && now - rss_read_ns_ < 500'000'000) return rss_cached_;
  rss_read_ns_ = now;
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return rss_cached_;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return rss_cached_;
  buf[n] = '\0';
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) == 2) rss_cached_ = resident * ::sysconf(_SC_PAGESIZE);
  return rss_cached_;
}

void StepMonitor::step(std::optional<int64_t> number, std::vector<std::pair<std::string, double>> scalars) {
  const int64_t s = number ? *number : current_step() + 1;
  step_.store(s, std::memory_order_relaxed);
  report_step(s);  // the hang detector's progress, as before
  if (!enabled()) return;
  constexpr auto relaxed = std::memory_order_relaxed;

  StepRecord r;
  r.step = s;
  r.t = wall_seconds();
  // Close the phase in progress and open "data" for the next step.
  const int64_t now = steady_ns();
  // This call's own time goes into the next record (this one is sent before the call ends).
  struct Overhead {
    std::atomic<int64_t>& total;
    int64_t begin;
    ~Overhead() { total.fetch_add(steady_ns() - begin, std::memory_order_relaxed); }
  } overhead{overhead_ns_, now};
  r.monitor_s = static_cast<double>(overhead_ns_.exchange(0, relaxed)) / 1e9;
  const int64_t cpu = process_cpu_ns();
  r.cpu_s = static_cast<double>(cpu - last_cpu_ns_.exchange(cpu, relaxed)) / 1e9;
  const int64_t last = last_ns_.load(relaxed);
  const int current = current_.load(relaxed);
  int64_t start = step_start_ns_.load(relaxed);
  if (last == 0) {
    start = created_ns_;  // no mark yet: since the monitor began
  } else if (current >= 0) {
    acc_ns_[current].store(acc_ns_[current].load(relaxed) + (now - last), relaxed);
    if (timeline_on_) timeline_.phase_span(current, last, now);
  }
  const uint32_t mask = mask_.load(relaxed);
  if (timeline_on_) timeline_.take(this, start, (mask & ~1u) != 0, r.timeline);
  r.step_s = static_cast<double>(now - start) / 1e9;
  if (mask & ~1u) {  // a DDP mark this step (data alone is just the time between steps)
    r.phase_mask = static_cast<uint8_t>(mask);
    for (int p = 0; p < kPhaseCount; ++p) r.phase_s[p] = static_cast<double>(acc_ns_[p].load(relaxed)) / 1e9;
  }
  for (auto& a : acc_ns_) a.store(0, relaxed);
  mask_.store(1u << static_cast<int>(Phase::data), relaxed);
  current_.store(static_cast<int>(Phase::data), relaxed);
  step_start_ns_.store(now, relaxed);
  last_ns_.store(now, relaxed);

  const int64_t samples = samples_.exchange(0, relaxed);
  if (samples > 0) {
    r.samples = samples;
    if (r.step_s > 0) r.samples_per_s = static_cast<double>(samples) / r.step_s;
  }
  if (has_grad_norm_.exchange(false, relaxed)) r.grad_norm = grad_norm_value_.load(relaxed);
  r.skipped = skipped_.exchange(false);
  const bool grad_anomaly_sent = grad_anomaly_sent_.exchange(false);

  const CommTotals comm = flight_recorder().take_comm_totals();
  r.comm_bytes = comm.bytes;
  r.comm_s = static_cast<double>(comm.gradient_busy_us) / 1e6;
  const int64_t hook_input = hook_input_bytes_.exchange(0, relaxed), hook_output = hook_output_bytes_.exchange(0, relaxed);
  // The hook's own ratio: over the gradient collectives' bytes it would count the hierarchical
  // path's float reduce-scatter and allgather inside the node (0.8 for fp16 through it).
  if (hook_input > 0 && hook_output > 0) r.compression = static_cast<double>(hook_input) / hook_output;
  WorkerIdentity who;
  {
    std::lock_guard<std::mutex> lock(mu_);
    who = identity_locked();
    r.rss_bytes = rss_bytes();
  }
  if (comm.gradient_busy_us > 0 && who.world_size > 1) {
    const int n = who.world_size;
    r.busbw = static_cast<double>(comm.gradient_bytes) / r.comm_s * 2.0 * (n - 1) / n;
  }
  const int cuda = cuda_device_.load(relaxed);
  if (cuda >= 0) r.cuda_bytes = cuda_allocated_bytes(cuda);
  r.scalars = std::move(scalars);

  std::optional<double> bad_loss;
  if (auto loss = r.scalar("loss"); loss && !std::isfinite(*loss)) bad_loss = loss;
  AgentLink* link = agent_link();
  if (link && link->send(metrics_message(r, who))) messages_sent_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = std::move(r);
  }
  if (bad_loss) {
    if (!grad_anomaly_sent) {
      anomaly("loss", *bad_loss, who.rank, s);  // throws for stop
    } else if (static_cast<OnNan>(on_nan_.load()) == OnNan::stop) {
      throw AnomalyError(who.rank, "non-finite loss at step " + std::to_string(s) + "; stopping (on_nan=stop)");
    }
  }
}

std::optional<StepRecord> StepMonitor::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void StepMonitor::send_event(const std::string& kind, int64_t step, const std::string& message,
                             const std::string& fields_json) {
  AgentLink* link = agent_link();
  if (!link) return;
  const WorkerIdentity who = identity();
  nlohmann::json j = {{"type", "event"}, {"pid", who.pid},     {"rank", who.rank}, {"t", wall_seconds()},
                      {"kind", kind},    {"step", step},       {"message", message}};
  if (!fields_json.empty()) {
    auto fields = nlohmann::json::parse(fields_json, nullptr, /*allow_exceptions=*/false);
    if (fields.is_object()) {
      for (auto it = fields.begin(); it != fields.end(); ++it)
        if (!j.contains(it.key())) j[it.key()] = it.value();  // the kind's fields at the top level ...
      j["fields"] = fields;                                      // ... and together
    }
  }
  link->send(dump_text(j));  // the message names a path: any bytes
}

void StepMonitor::checkpoint_saved(int64_t step, const std::string& path, int64_t bytes, double seconds) {
  if (!enabled()) return;
  char text[96];
  std::snprintf(text, sizeof(text), " committed (%.1f MB, %.2f s)", static_cast<double>(bytes) / 1e6, seconds);
  const auto slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  nlohmann::json fields = {{"path", path}, {"bytes", bytes}, {"seconds", seconds}};
  send_event("checkpoint_saved", step, "checkpoint " + name + text, dump_text(fields));
}

void StepMonitor::checkpoint_restored(int64_t step, const std::string& path, bool from_snapshot, double seconds) {
  if (!enabled()) return;
  const char* source = from_snapshot ? "snapshot" : "checkpoint";
  nlohmann::json fields = {{"path", path}, {"source", source}, {"seconds", seconds}};
  char took[32];
  std::snprintf(took, sizeof(took), ", %.3f s", seconds);
  send_event("checkpoint_restored", step,
             std::string("restored ") + (from_snapshot ? "in-memory snapshot " : "") + path + " (step " +
                 std::to_string(step) + took + ")",
             dump_text(fields));
}

// --- the process's monitor and the thread binding --------------------------------------------------

namespace {
thread_local Monitor* t_bound = nullptr;

Monitor& process_monitor() {
  static Monitor* instance = new Monitor();  // never destroyed: DDP hooks may mark during exit
  return *instance;
}
}  // namespace

StepMonitor& current_step_monitor() { return MonitorInternals::of(monitor()); }

}  // namespace detail

// --- public API ------------------------------------------------------------------------------------

const char* to_string(OnNan policy) {
  switch (policy) {
    case OnNan::stop: return "stop";
    case OnNan::skip: return "skip";
    case OnNan::warn: return "warn";
  }
  return "stop";
}

std::optional<OnNan> parse_on_nan(const std::string& text) {
  if (text == "stop") return OnNan::stop;
  if (text == "skip") return OnNan::skip;
  if (text == "warn") return OnNan::warn;
  return std::nullopt;
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::comm_wait: return "comm_wait";
    case Phase::optimizer: return "optimizer";
  }
  return "unknown";
}

MonitorOptions MonitorOptions::from_env() {
  MonitorOptions o;
  if (const char* on = std::getenv("COHORT_MONITOR")) o.enabled = std::string(on) != "0";
  if (const char* nan = std::getenv("COHORT_ON_NAN"); nan && *nan) {
    if (auto policy = parse_on_nan(nan)) {
      o.on_nan = *policy;
    } else {
      detail::log_warn(std::string("COHORT_ON_NAN='") + nan + "' is not stop, skip or warn; using stop");
    }
  }
  return o;
}

Monitor::Monitor() : Monitor(MonitorOptions::from_env()) {}
Monitor::Monitor(const MonitorOptions& options) : impl_(std::make_unique<detail::StepMonitor>(options)) {}
Monitor::~Monitor() = default;

void Monitor::configure(const MonitorOptions& options) { impl_->configure(options); }
MonitorOptions Monitor::options() const { return impl_->options(); }

void Monitor::step(Scalars scalars) { impl_->step(std::nullopt, {scalars.begin(), scalars.end()}); }
void Monitor::step(const std::map<std::string, double>& scalars) {
  impl_->step(std::nullopt, {scalars.begin(), scalars.end()});
}
void Monitor::step(int64_t step, Scalars scalars) { impl_->step(step, {scalars.begin(), scalars.end()}); }
void Monitor::step(int64_t step, const std::map<std::string, double>& scalars) {
  impl_->step(step, {scalars.begin(), scalars.end()});
}

int64_t Monitor::current_step() const { return impl_->current_step(); }
void Monitor::set_step(int64_t step) { impl_->set_step(step); }
std::optional<StepRecord> Monitor::last() const { return impl_->last(); }
int64_t Monitor::skipped_steps() const { return impl_->skipped_steps(); }
int64_t Monitor::messages_sent() const { return impl_->messages_sent(); }

Monitor& monitor() { return detail::t_bound ? *detail::t_bound : detail::process_monitor(); }

ScopedMonitor::ScopedMonitor(Monitor& m) : previous_(detail::t_bound) { detail::t_bound = &m; }
ScopedMonitor::~ScopedMonitor() { detail::t_bound = previous_; }

}  // namespace cohort
