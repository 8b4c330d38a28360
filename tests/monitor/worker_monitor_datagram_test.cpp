// Worker-side monitoring (issue 6), ranks as threads (each bound to its own Monitor with ScopedMonitor):
// the messages the monitor sends to its agent: the "metrics" datagram and the events, at a socket
// standing in for the agent. Behaviour only: no timing assertions.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "cohort/monitor.h"
#include "cohort/sharded_data_parallel.h"
#include "monitor/worker_monitor.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/flight_recorder.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "worker_monitor_fixtures.h"

namespace {

using namespace worker_monitor_test;

// --- the datagram to the agent --------------------------------------------------------------------

class AgentSocket {
 public:
  AgentSocket() {
    char templ[] = "/tmp/cohort-monitor-XXXXXX";
    dir_ = mkdtemp(templ);
    path_ = dir_ + "/agent.sock";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
    ::setenv("COHORT_AGENT_SOCKET", path_.c_str(), 1);
    ::setenv("COHORT_HEARTBEAT_MS", "600000", 1);
    cohort::detail::stop_agent_link_for_testing();
    cohort::JobEnv env;
    cohort::detail::start_agent_link(env);  // the link init() would start under `cohort run`
    EXPECT_NE(cohort::detail::agent_link(), nullptr);
  }
  ~AgentSocket() {
    cohort::detail::stop_agent_link_for_testing();
    ::unsetenv("COHORT_AGENT_SOCKET");
    ::unsetenv("COHORT_HEARTBEAT_MS");
    ::close(fd_);
    std::filesystem::remove_all(dir_);
  }
  /// The next message of `type` (others skipped; "" : any but heartbeats), or null after `ms`
  /// without one.
  nlohmann::json next(const std::string& type, int ms = 10000) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, ms) <= 0) return nullptr;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return nullptr;
      auto j = nlohmann::json::parse(std::string(buf, static_cast<size_t>(n)));
      const std::string got = j.value("type", "");
      if (got == type || (type.empty() && got != "heartbeat")) return j;
    }
  }

 private:
  std::string dir_, path_;
  int fd_ = -1;
};

TEST(WorkerMonitorDatagram, MetricsMessageArrivesWithTheSpecFields) {
  AgentSocket agent;
  const int world = 2;
  const auto batches = make_batches(2, 8);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts());
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (const auto& b : batches) {
      auto loss = train_step(model, sgd, b, r, world);
      cohort::monitor().step({{"loss", loss.item<double>()}, {"lr", 0.1}});
    }
    EXPECT_EQ(mon.messages_sent(), 2);
  });
  std::map<int, nlohmann::json> second;  // rank → its step-2 message
  for (int i = 0; i < 2 * world; ++i) {
    auto j = agent.next("metrics");
    ASSERT_FALSE(j.is_null()) << "metrics message " << i << " did not arrive";
    if (j["step"] == 2) second[j["rank"].get<int>()] = j;
  }
  ASSERT_EQ(second.size(), 2u);
  for (const auto& [rank, j] : second) {
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["pid"], static_cast<int64_t>(::getpid()));
    EXPECT_EQ(j["world_size"], world);
    EXPECT_EQ(j["restart"], 0);
    EXPECT_GT(j["t"].get<double>(), 1.7e9);
    const double step_s = j["step_s"].get<double>();
    double sum = 0;
    for (const char* p : {"data", "forward", "backward", "comm_wait", "optimizer"}) {
      ASSERT_TRUE(j["phases"].contains(p)) << p;
      sum += j["phases"][p].get<double>();
    }
    EXPECT_NEAR(sum, step_s, 1e-6);
    EXPECT_EQ(j["samples"], 4);
    EXPECT_GT(j["samples_per_s"].get<double>(), 0);
    EXPECT_TRUE(j["grad_norm"].is_number());
    EXPECT_GT(j["rss_bytes"].get<int64_t>(), 0);
    EXPECT_FALSE(j.contains("cuda_bytes"));
    EXPECT_TRUE(j["comm_bytes"].is_number_integer());
    EXPECT_TRUE(j["comm_s"].is_number());
    // The second step's record carries the first step() call and this step's gradient norm.
    EXPECT_GT(j["monitor_s"].get<double>(), 0);
    EXPECT_LT(j["monitor_s"].get<double>(), step_s);
    EXPECT_GT(j["cpu_s"].get<double>(), 0) << "the process's CPU time in the step (sim calibrate's load check)";
    EXPECT_TRUE(j["scalars"]["loss"].is_number());
    EXPECT_EQ(j["scalars"]["lr"], 0.1);
  }
}

TEST(WorkerMonitorDatagram, AnomalyAndCheckpointEventsArrive) {
  AgentSocket agent;
  cohort::Monitor mon(opts(cohort::OnNan::warn));
  cohort::ScopedMonitor bind(mon);
  cohort::monitor().step({{"loss", kNaN}});
  auto e = agent.next("event");
  ASSERT_FALSE(e.is_null());
  EXPECT_EQ(e["kind"], "anomaly");
  EXPECT_EQ(e["anomaly"], "nan");
  EXPECT_EQ(e["policy"], "warn");
  EXPECT_EQ(e["what"], "loss");
  EXPECT_EQ(e["step"], 1);
  cohort::detail::MonitorInternals::of(mon).checkpoint_saved(200, "/x/step-00000200", 12300000, 0.21);
  e = agent.next("event");
  ASSERT_FALSE(e.is_null());
  EXPECT_EQ(e["kind"], "checkpoint_saved");
  EXPECT_EQ(e["step"], 200);
  EXPECT_EQ(e["fields"]["bytes"], 12300000);
  EXPECT_EQ(e["message"], "checkpoint step-00000200 committed (12.3 MB, 0.21 s)");
}

// Bytes that are not UTF-8 (a user's metric name, a Latin-1 checkpoint directory) arrive as U+FFFD
// (issue 50): the agent's parser refused the metrics datagram with such a name, dropping the step,
// and the checkpoint's event threw type_error.316 out of the save.
TEST(WorkerMonitorDatagram, NamesThatAreNotUtf8ArriveReplaced) {
  AgentSocket agent;
  cohort::Monitor mon(opts());
  cohort::ScopedMonitor bind(mon);
  cohort::monitor().step({{"caf\xe9", 1.5}});
  auto m = agent.next("metrics");
  ASSERT_FALSE(m.is_null());
  EXPECT_EQ(m["scalars"]["caf\xEF\xBF\xBD"], 1.5) << m.dump();
  cohort::detail::MonitorInternals::of(mon).checkpoint_saved(3, "/x/caf\xe9/step-00000003", 10, 0.1);
  auto e = agent.next("event");
  ASSERT_FALSE(e.is_null());
  EXPECT_EQ(e["fields"]["path"], "/x/caf\xEF\xBF\xBD/step-00000003");
}

TEST(WorkerMonitorDatagram, CheckpointCommitAndRestoreSendEventsFromRankZero) {
  AgentSocket agent;
  char templ[] = "/tmp/cohort-monitor-ckpt-XXXXXX";
  const std::string dir = mkdtemp(templ);
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<cohort::Context> ctx) {
    cohort::Monitor mon(opts());
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const cohort::TrainingState state{model.ptr().get(), &sgd, nullptr};
    cohort::CheckpointOptions o;
    o.every_steps = 3;  // a background save at step 3
    {
      cohort::Checkpointer ckpt(dir, ctx, o);
      for (int s = 0; s < 3; ++s) ckpt.maybe_save(state);
      ckpt.wait();
    }
    ctx->barrier();  // rank 0 has committed
    cohort::Checkpointer again(dir, ctx, o);
    again.restore_latest(state);
  });
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      ADD_FAILURE() << x.what();
    }
  }
  // First DDP's bucket plan, once, from rank 0 (cohort sim calibrate reads the first bucket's bytes).
  auto buckets = agent.next("event");
  ASSERT_FALSE(buckets.is_null());
  EXPECT_EQ(buckets["kind"], "ddp_buckets");
  EXPECT_EQ(buckets["rank"], 0);
  EXPECT_GE(buckets["buckets"].get<int64_t>(), 1) << buckets.dump();
  EXPECT_GT(buckets["first_bytes"].get<int64_t>(), 0) << buckets.dump();
  EXPECT_GE(buckets["total_bytes"].get<int64_t>(), buckets["first_bytes"].get<int64_t>()) << buckets.dump();
  auto saved = agent.next("event");
  ASSERT_FALSE(saved.is_null());
  EXPECT_EQ(saved["kind"], "checkpoint_saved");
  EXPECT_EQ(saved["rank"], 0);
  EXPECT_EQ(saved["step"], 3);
  EXPECT_EQ(saved["path"], dir + "/step-00000003");
  EXPECT_GT(saved["bytes"].get<int64_t>(), 0);
  EXPECT_GE(saved["seconds"].get<double>(), 0);
  auto restored = agent.next("event");
  ASSERT_FALSE(restored.is_null());
  EXPECT_EQ(restored["kind"], "checkpoint_restored");
  EXPECT_EQ(restored["step"], 3);
  EXPECT_EQ(restored["path"], dir + "/step-00000003");
  EXPECT_TRUE(agent.next("event", 200).is_null()) << "only rank 0 reports checkpoints";
  std::filesystem::remove_all(dir);
}

TEST(WorkerMonitorDatagram, MonitorOffSendsNothing) {
  AgentSocket agent;
  ::setenv("COHORT_MONITOR", "0", 1);
  cohort::Monitor off;  // options from the environment
  ::unsetenv("COHORT_MONITOR");
  EXPECT_FALSE(off.options().enabled);
  {
    cohort::ScopedMonitor bind(off);
    for (int i = 0; i < 3; ++i) cohort::monitor().step({{"loss", kNaN}, {"marker", 1}});
    EXPECT_EQ(cohort::monitor().current_step(), 3);  // still counted
    EXPECT_FALSE(cohort::monitor().last().has_value());
    EXPECT_EQ(off.messages_sent(), 0);
  }
  cohort::Monitor on(opts());
  cohort::ScopedMonitor bind(on);
  cohort::monitor().step({{"marker", 2}});
  // Datagrams from one socket arrive in order: the first message but heartbeats is the one sent
  // with monitoring on (no metrics, no NaN anomaly before it).
  auto j = agent.next("");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["type"], "metrics");
  EXPECT_EQ(j["scalars"]["marker"], 2);
}

}  // namespace
