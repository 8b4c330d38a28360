// cohort::init(): environment → store → process groups. See cohort/context.h.
#include "cohort/context.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef COHORT_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <fcntl.h>
#include <sys/socket.h>  // SOMAXCONN
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <optional>
#include <vector>
#include <thread>

#include "cohort/error.h"
#include "cohort/memory_reuse.h"
#include "cohort/threads.h"
#include "log.h"
#include "duration_text.h"
#include "runtime/net/gloo_abandon.h"
#include "runtime/net/net_util.h"
#include "torch_compat_internal.h"
#include "runtime/host/shm_allreduce.h"
#include "runtime/clock/clock_sync.h"
#include "context_internals.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/host/blas_core.h"
#include "runtime/agent_link/flight_recorder.h"
#include "runtime/agent_link/rejoin_watch.h"
#include "runtime/agent_link/spare_fork.h"
#include "worker_identity.h"

namespace cohort {
namespace {

using detail::seconds_text;

void apply_env_overrides(InitOptions& options, int rank) {
  // A positive number from `var`, if set; `what` completes the error ("a positive number<what>").
  auto positive = [&](const char* var, const char* what) -> std::optional<double> {
    auto v = process_env(var);
    if (!v) return std::nullopt;
    try {
      const double x = std::stod(*v);
      if (std::isfinite(x) && x > 0 && x <= 1e7) return x;  // inf or 1e300 would overflow a deadline
    } catch (const std::exception&) {
    }
    throw ConfigError(rank, std::string(var) + "='" + *v + "' is not a positive number" + what);
  };
  if (auto s = positive("COHORT_STORE_TIMEOUT_S", " of seconds")) {
    options.store_timeout = std::chrono::milliseconds(static_cast<int64_t>(*s * 1000));
  }
  if (auto s = positive("COHORT_COLLECTIVE_TIMEOUT_S", " of seconds")) {
    options.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(*s * 1000));
  }
  if (auto v = process_env("COHORT_SHM")) options.shm_allreduce = *v != "0";
  if (auto v = process_env("COHORT_RETAIN_FREED_MEMORY")) options.retain_freed_memory = *v != "0";
  if (auto mb = positive("COHORT_SHM_SLOT_MB", "")) options.shm_slot_bytes = static_cast<size_t>(*mb * (1 << 20));
  if (auto v = process_env("COHORT_THREADS")) {
    int threads = 0;
    try {
      size_t used = 0;
      threads = std::stoi(*v, &used);
      if (used != v->size()) threads = 0;
    } catch (const std::exception&) {
    }
    if (threads < 1 || threads > 1024) {
      throw ConfigError(rank, "COHORT_THREADS='" + *v + "' is not a number of threads (1..1024)");
    }
    options.threads = threads;
  }
}

// `cohort run --warm-spares` starts the next round's workers ahead of time with COHORT_STANDBY=1
// and that round's variables: everything before init() (loading libtorch, the program's own
// set-up, its data) is done by the time a failure ends the round. They must not touch the store
// or the process group before the round begins, so they wait here for the agent's "go".
void wait_if_standby(JobEnv& env) {
  auto standby = process_env("COHORT_STANDBY");
  if (!standby || *standby != "1") return;
  // A spare that replaces one worker of a running round (--keep-survivors) learns its generation
  // here, and may first fork the next spare (spare_fork.h).
  const int generation = detail::wait_as_standby(env);
  if (generation >= 0) env.generation = generation;
}

// The libtorch this program was compiled against: ranks built against different ones would meet
// in collectives with different wire formats and tensor layouts, so init() refuses to go on.
std::string libtorch_build() {
  std::string build = "libtorch " TORCH_VERSION;
#ifdef USE_C10D_NCCL
  build += " with CUDA and NCCL";
#else
  build += " without CUDA";
#endif
  return build;
}

std::string libtorch_key(int rank) { return "cohort/init/libtorch/" + std::to_string(rank); }

std::vector<uint8_t> c10d_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// "rank R runs X, this rank runs Y" for the first rank whose libtorch differs, else nullopt.
std::optional<std::string> libtorch_mismatch(c10d::Store& store, const JobEnv& env) {
  const std::string mine = libtorch_build();
  for (int r = 0; r < env.world_size; ++r) {
    if (r == env.rank) continue;
    const auto bytes = store.get(libtorch_key(r));
    const std::string theirs(bytes.begin(), bytes.end());
    if (theirs != mine) {
      return "rank " + std::to_string(r) + " runs " + theirs + ", this rank runs " + mine +
             ": every rank of a job must run a program built against the same libtorch";
    }
  }
  return std::nullopt;
}

// The ranks of one machine meet in a file (COHORT_STORE_FILE): nothing listens, and only who may
// open the file (cohort run's 0700 run directory) can read or change the job's keys.
c10::intrusive_ptr<c10d::Store> open_file_store(const JobEnv& env, const InitOptions& options) {
  // Opened here first: c10d's FileStore only fails at its first operation, and its destructor
  // then throws again (std::terminate).
  const int fd = ::open(env.store_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(env.rank, "could not open the store file " + env.store_file + " (COHORT_STORE_FILE): " +
                                    std::strerror(err));
  }
  ::close(fd);
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(env.store_file, env.world_size);
    store->setTimeout(options.store_timeout);
    return store;
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw ConfigError(env.rank, "could not open the store file " + env.store_file + " (COHORT_STORE_FILE): " +
                                    cause.substr(0, cause.find('\n')));
  }
}

c10::intrusive_ptr<c10d::Store> open_tcp_store(const JobEnv& env, const InitOptions& options) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  // Rank 0 hosts the store, unless node 0's cohort run does (it then outlives every worker).
  const bool hosting = env.rank == 0 && !env.store_hosted;
  opts.isServer = hosting;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = false;  // we wait ourselves below, with a timeout and a count for the message
  opts.timeout = options.store_timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  // c10d's client would retry an unknown name until the store timeout, printing a line per try.
  if (const std::string problem = detail::resolve_problem(env.master_addr); !problem.empty()) {
    throw ConfigError(env.rank, "MASTER_ADDR '" + env.master_addr + "' does not resolve (" + problem + ")");
  }
  c10::intrusive_ptr<c10d::Store> store;
  if (!hosting) {
    // Whether or not this succeeds, TCPStore below reports the failure with its own cause.
    detail::wait_until_listening(env.master_addr, env.master_port, options.store_timeout.count());
  }
#if COHORT_TCPSTORE_TAKES_LISTEN_FD
  // The store's server listens on the master address only, not on every interface (docs/security.md).
  if (hosting) {
    std::string problem;
    const int fd = detail::listen_on(env.master_addr, env.master_port, SOMAXCONN, &problem);
    if (fd < 0) {
      throw ConfigError(0, "could not host the store on port " + std::to_string(env.master_port) + " of " +
                               env.master_addr + " (" + problem + "); is the port in use, or MASTER_ADDR not an "
                               "address of this machine? choose another MASTER_PORT or MASTER_ADDR");
    }
    opts.masterListenFd = fd;  // the store's server owns it from here
  }
#endif
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));
    if (hosting) {
      throw ConfigError(0, "could not host the store on port " + std::to_string(env.master_port) + " of " +
                               env.master_addr + "; is the port in use? choose another MASTER_PORT (" + cause + ")");
    }
    throw TimeoutError(env.rank, "could not reach the store at " + where + " within " +
                                     seconds_text(options.store_timeout) +
                                     "; is " + std::string(env.store_hosted ? "node 0's cohort run (which hosts it)" : "rank 0") + " running, MASTER_ADDR/MASTER_PORT right, and every rank's program built against the "
                                     "same libtorch (the stores of libtorch 1.x and 2.x do not talk)? (" + cause + ")");
  }
  return store;
}

c10::intrusive_ptr<c10d::Store> connect_store(const JobEnv& env, const InitOptions& options) {
  if (env.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  auto store = env.store_file.empty() ? open_tcp_store(env, options) : open_file_store(env, options);
  const std::string where = env.store_file.empty() ? env.master_addr + ":" + std::to_string(env.master_port)
                                                   : env.store_file;
  // Every rank records its libtorch before counting itself in, so that after the wait below each
  // rank can compare all of them (libtorch_mismatch) and every rank fails with the same message.
  store->set(libtorch_key(env.rank), c10d_bytes(libtorch_build()));
  // A replacement joins a running job (keep_running.h): the others counted themselves in long ago,
  // and meet it in the generation's process groups instead. Its libtorch is checked all the same.
  if (env.generation > 0) {
    if (auto mismatch = libtorch_mismatch(*store, env)) throw ConfigError(env.rank, *mismatch);
    return store;
  }
  // Every rank counts itself in, then waits until all have: a missing rank is reported here,
  // with how many came, instead of as a timeout deep inside the process group's set-up.
  const std::string key = "cohort/init/joined";
  int64_t joined = store->add(key, 1);
  const auto deadline = std::chrono::steady_clock::now() + options.store_timeout;
  auto pause = std::chrono::milliseconds(2);
  while (joined < env.world_size) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw TimeoutError(env.rank, "only " + std::to_string(joined) + " of the " + std::to_string(env.world_size) +
                                       " ranks reached the store at " + where + " within " +
                                       seconds_text(options.store_timeout) +
                                       (env.store_file.empty() ? "; were all ranks started, with the same MASTER_ADDR/MASTER_PORT?"
                                                               : "; were all ranks started, with the same COHORT_STORE_FILE?"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    joined = store->add(key, 0);
  }
  if (auto mismatch = libtorch_mismatch(*store, env)) throw ConfigError(env.rank, *mismatch);
  return store;
}

#ifdef COHORT_WITH_GLOO
// libtorch 2.x's own flight recorder (c10d::FlightRecorder, on by default with 2,000 entries)
// inserts each process group's status into a map before it takes its mutex: the first collectives
// of two groups in one process at once (ranks as threads, or a mesh rank's groups on several
// threads) corrupt it and crash (SIGSEGV in recordWithResetEnabled, seen on 2.11). cohort records
// its own collectives (runtime/agent_link/flight_recorder.h), so it turns libtorch's off unless the
// user set its size. Set while the library loads, before any thread or group exists; 1.13 has none.
const bool kLibtorchFlightRecorderOff = [] {
  if (!std::getenv("TORCH_FR_BUFFER_SIZE") && !std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE")) ::setenv("TORCH_FR_BUFFER_SIZE", "0", 0);
  return true;
}();

std::shared_ptr<::gloo::transport::Device> gloo_device(const JobEnv& env) {
  for (const char* var : {"COHORT_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (auto ifname = process_env(var)) return c10d::ProcessGroupGloo::createDeviceForInterface(*ifname);
  }
  // A store file means ranks that share a machine: their pairs connect over loopback too.
  if (env.world_size == 1 || !env.store_file.empty() || detail::is_loopback(env.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  // The address that routes to the store's host is the one peers can reach us on; this works
  // where the hostname does not resolve (containers, network namespaces).
  std::string local = detail::local_address_towards(env.master_addr);
  if (local.empty()) return c10d::ProcessGroupGloo::createDefaultDevice();
  return c10d::ProcessGroupGloo::createDeviceForHostname(local);
}
#endif

}  // namespace

Context::Context(JobEnv env, c10::intrusive_ptr<c10d::Store> store, const InitOptions& options)
    : env_(std::move(env)), options_(options), store_(std::move(store)) {
  connect_groups();
}

c10::intrusive_ptr<c10d::Store> Context::generation_store() const {
  if (env_.generation == 0) return store_;
  return c10::make_intrusive<c10d::PrefixStore>("cohort/gen" + std::to_string(env_.generation), store_);
}

void Context::connect_groups() {
  const auto store = generation_store();
#ifdef COHORT_WITH_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create(options_.collective_timeout);
  opts->devices.push_back(gloo_device(env_));
  try {
    cpu_group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("cohort/gloo", store), env_.rank, env_.world_size, opts);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw CommError(env_.rank, "could not connect the Gloo process group to the other " +
                                   std::to_string(env_.world_size - 1) + " ranks" +
                                   (env_.generation > 0 ? " (generation " + std::to_string(env_.generation) + ")" : "") +
                                   " (" + cause.substr(0, cause.find('\n')) + ")");
  }
  // The job clock (timelines): this rank's offset against rank 0's, on every connect.
  try {
    detail::sync_job_clock(*cpu_group_, env_.rank, env_.world_size);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw CommError(env_.rank, "measuring the clock against rank 0 failed; a peer may have died (" +
                                   cause.substr(0, cause.find('\n')) + ")");
  }
#endif
  if (env_.world_size > 1) {
    const bool eligible = options_.shm_allreduce && env_.local_world_size == env_.world_size;
    shm_ = detail::ShmAllreduce::create(env_.rank, env_.world_size, eligible, store, options_.collective_timeout,
                                        options_.shm_slot_bytes);
  }
}

void Context::rejoin(int generation) {
  if (generation <= env_.generation) {
    throw ConfigError(env_.rank, "rejoin: generation " + std::to_string(generation) + " is not after this rank's " +
                                     std::to_string(env_.generation));
  }
  detail::log_info("re-forming the process groups as generation " + std::to_string(generation) +
                   " (a peer was replaced; this process keeps running)");
  // The peers give up on this rank at the store timeout: say where it is well before that.
  detail::RejoinWatch watch(generation, std::min<std::chrono::milliseconds>(options_.store_timeout / 4,
                                                                            std::chrono::seconds(5)));
  watch.stage("closing the old groups' connections");
  // First every old group's connections close (gloo_abandon.h): a peer still waiting in one for
  // this rank — a ring step, a bucket between nodes, a buddy exchange — fails now instead of at
  // the collective timeout.
  if (cpu_group_) detail::abandon_gloo_group(*cpu_group_);
  {
    std::lock_guard<std::mutex> lock(subgroups_mutex_);
    for (auto& weak : subgroups_)
      if (auto group = weak.lock()) detail::abandon_gloo_group(*group);
    subgroups_.clear();
  }
  for (auto& [key, listener] : rejoin_listeners_) {
    watch.stage("letting go of the old groups in " + listener.what);
    listener.release();
  }
  watch.stage("connecting the new groups");
  // The old group's destructor waits for the work it still has, which fails once its peers close
  // theirs: on a thread of its own, so that this rank never waits for a peer it abandoned. Closing
  // it — nothing else holds it once every object released it — is what makes a rank blocked on
  // this one (not on the dead one: a ring's far side on Gloo) fail over too.
  if (cpu_group_) std::thread([old = std::move(cpu_group_)]() mutable { old.reset(); }).detach();
  if (cuda_group_) std::thread([old = std::move(cuda_group_)]() mutable { old.reset(); }).detach();
  if (shm_) retired_shm_.push_back(std::move(shm_));
  env_.generation = generation;
  connect_groups();
  if (auto who = detail::process_identity()) {
    who->generation = generation;
    detail::record_process_identity(*who);
  }
  // In registration order: the order in which the replacement constructs the same objects.
  for (auto& [key, listener] : rejoin_listeners_) {
    watch.stage("reconnecting " + listener.what + " (a collective)");
    listener.reconnect();
  }
}

Context::~Context() = default;

namespace detail {
c10::intrusive_ptr<Backend> make_cpu_subgroup(const Context& ctx, const std::string& prefix, int rank, int size) {
#ifdef COHORT_WITH_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create(ctx.options().collective_timeout);
  opts->devices.push_back(gloo_device(ctx.env()));
  try {
    c10::intrusive_ptr<Backend> group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(prefix, ContextInternals::generation_store(ctx)), rank, size, opts);
    ContextInternals::track_subgroup(ctx, group);
    return group;
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw CommError(ctx.rank(), "could not connect the Gloo subgroup " + prefix + " (" +
                                    cause.substr(0, cause.find('\n')) + ")");
  }
#else
  (void)ctx, (void)prefix, (void)rank, (void)size;
  return {};
#endif
}
}  // namespace detail

c10::Device Context::device(c10::DeviceType type) const {
  if (type != c10::kCUDA) return c10::Device(type);
#ifdef USE_C10D_NCCL
  if (!torch::cuda::is_available()) {
    throw ConfigError(env_.rank, "CUDA tensors asked for, but this machine has no CUDA device (this libtorch has "
                                 "CUDA; check the driver and CUDA_VISIBLE_DEVICES, or train on the CPU)");
  }
  const auto count = static_cast<int>(torch::cuda::device_count());
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank % count));
#else
  throw ConfigError(env_.rank, "CUDA tensors asked for, but this libtorch (" TORCH_VERSION
                               ") was built without CUDA and NCCL; build against a CUDA libtorch, or train on the CPU");
#endif
}

const c10::intrusive_ptr<Backend>& Context::group(const c10::Device& device) const {
  if (device.is_cuda()) {
    this->device(c10::kCUDA);  // the same one-line errors where there is no CUDA
#ifdef USE_C10D_NCCL
    if (!cuda_group_) {
      cuda_group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>("cohort/nccl", store_), env_.rank, env_.world_size,
          c10d::ProcessGroupNCCL::Options::create());
    }
    return cuda_group_;
#endif
  }
  if (!cpu_group_) {
    throw ConfigError(env_.rank,
                      "CPU tensors need the Gloo backend, and cohort was built without Gloo headers "
                      "(install libgloo-dev, or use CUDA tensors with NCCL)");
  }
  return cpu_group_;
}

void Context::barrier() {
  detail::FlightScope entry(detail::FlightOp{"barrier", "", -1, "gloo", "", 0, 0});
  group()->barrier()->wait();
  entry.done();
}

namespace {

// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, before init(): a process that runs its
// generic kernels although the CPU runs better ones can only be told how to start (blas_core.h).
void report_openblas_core() {
  const auto loaded = detail::loaded_openblas_core();
  if (!loaded) return;
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  const auto better = detail::openblas_core_upgrade(*loaded, detail::openblas_core_for(detail::this_cpu_features()));
  if (better && !chosen) {
    detail::log_warn("OpenBLAS does not know this CPU and runs its generic " + *loaded +
                     " kernels; this CPU runs its " + *better +
                     " kernels, several times faster for linear layers. Start the workers with OPENBLAS_CORETYPE=" +
                     *better + " (cohort run does it for its workers)");
  } else {
    detail::log_info("OpenBLAS runs its " + *loaded + " kernels" +
                     (chosen ? std::string(" (OPENBLAS_CORETYPE=") + chosen + ")" : std::string()));
  }
}

}  // namespace

std::shared_ptr<Context> init(InitOptions options) {
  JobEnv env = resolve_job_env();
  detail::set_log_rank(env.rank, env.node_rank);
  apply_env_overrides(options, env.rank);
  set_num_threads(options.threads);
  if (options.retain_freed_memory) retain_freed_memory();
  detail::log_info("joining a job of " + std::to_string(env.world_size) + " (from " + env.source +
                   " variables), store " +
                   (env.store_file.empty() ? env.master_addr + ":" + std::to_string(env.master_port) : env.store_file));
  // Heartbeats to `cohort run`'s agent from now on (nothing starts without COHORT_AGENT_SOCKET).
  detail::start_agent_link(env);
  wait_if_standby(env);
  // Who this process is, for the layers above (the monitor's metrics header reads it).
  detail::WorkerIdentity who;
  who.rank = env.rank;
  who.world_size = env.world_size;
  who.local_rank = env.local_rank;
  who.node_rank = env.node_rank;
  who.restart_count = env.restart_count;
  who.generation = env.generation;
  who.pid = ::getpid();
  detail::record_process_identity(who);
  auto store = connect_store(env, options);
  auto ctx = std::make_shared<Context>(env, store, options);
  detail::log_info("joined: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size));
  // Advice for a process that trains, after it joined: a job that cannot start says only why.
  if (env.local_rank == 0) report_openblas_core();
  return ctx;
}

}  // namespace cohort
