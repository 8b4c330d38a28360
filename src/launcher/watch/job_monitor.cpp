// The agent's part in monitoring. See job_monitor.h.
#include "launcher/watch/job_monitor.h"

#include <sys/resource.h>  // getrusage: the agent's CPU time in the "finished" event

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cohort/error.h"
#include "hub/hub.h"
#ifdef COHORT_HAVE_DASHBOARD
#include "dashboard/server.h"
#endif

namespace cohort::launcher {
namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// The first line of a failure summary or a notice, without the "cohort run: " in front.
std::string first_line(const std::string& summary) {
  std::string line = summary.substr(0, summary.find('\n'));
  if (line.rfind("cohort run: ", 0) == 0) line.erase(0, 12);
  return line;
}

// Makes the directory (with parents); empty when it cannot, after a warning.
std::string make_run_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    std::cerr << "cohort run: warning: cannot create the run directory " << dir << ": "
              << (ec ? ec.message() : "not a directory") << "; the job runs without an event log" << std::endl;
    return "";
  }
  return dir;
}

}  // namespace

struct JobMonitor::Server {
#ifdef COHORT_HAVE_DASHBOARD
  std::unique_ptr<dashboard::Server> server;
#endif
};

std::string run_directory(const RunOptions& o) {
  std::string dir = !o.run_dir.empty() ? o.run_dir : o.log_dir;
  if (dir.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    dir = std::string("cohort-runs/") + stamp + "-" + std::to_string(::getpid());
  }
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dir, ec);
  return ec ? dir : absolute.lexically_normal().string();
}

std::unique_ptr<JobMonitor> JobMonitor::lead(const RunOptions& o, Coordinator& coordinator, const Assignment& first) {
  std::unique_ptr<JobMonitor> m(new JobMonitor(coordinator));
  m->node_rank_ = first.node_rank;
  const std::string dir = make_run_dir(run_directory(o));
  if (!dir.empty()) std::cerr << "cohort run: run directory " << dir << " (events.jsonl)" << std::endl;

  hub::HubOptions h;
  h.run_dir = dir;
  h.job_name = !o.rdzv_id.empty() ? o.rdzv_id : std::filesystem::path(run_directory(o)).filename().string();
  h.straggler_factor = o.straggler_factor;
  h.stall_timeout_s = o.stall_timeout_s;
  m->hub_ = std::make_unique<hub::Hub>(h);

  nlohmann::json argv = o.command;
  m->hub_->job_event("start", "cohort run started " + plural(o.nproc_per_node, "worker") + " per node: " + o.command[0],
                     {{"argv", argv},
                      {"nproc", o.nproc_per_node},
                      {"threads", o.threads_per_proc},  // each worker's intra-op threads (the simulator's calibration)
                      {"nnodes", first.nnodes},
                      {"run_dir", dir},
                      {"job", h.job_name},
                      {"pid", static_cast<int64_t>(::getpid())},
                      // The detectors' settings: a replay (`cohort dashboard`) judges with these.
                      {"detectors", {{"straggler_factor", h.straggler_factor},
                                     {"straggler_window", h.straggler_window},
                                     {"spike_factor", h.spike_factor},
                                     {"spike_window", h.spike_window},
                                     {"stall_timeout_s", h.stall_timeout_s}}}});
  m->hub_->job_event("rendezvous",
                     plural(first.nnodes, "node") + " met: " + plural(first.world_size, "rank") + " in round " +
                         std::to_string(first.round),
                     {{"round", first.round}, {"world_size", first.world_size}, {"nodes", first.nnodes}});

  hub::Hub* hub = m->hub_.get();
  coordinator.set_monitor_sink([hub](const nlohmann::json& message, int node) { hub->worker_message(message, node); });

  m->server_ = std::make_unique<Server>();
  if (!o.no_dashboard) {
#ifdef COHORT_HAVE_DASHBOARD
    try {
      m->server_->server = std::make_unique<dashboard::Server>(
          *hub, dashboard::ServerOptions{o.dashboard_host, o.dashboard_port, o.dashboard_token, dir});
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (why.rfind("cohort: ", 0) == 0) why.erase(0, 8);
      if (o.dashboard_port != 0) throw ConfigError(-1, why);  // the port asked for: say so and stop
      std::cerr << "cohort run: warning: no dashboard: " << why << std::endl;
    }
    if (m->server_->server) {
      const std::string url = m->server_->server->url();
      const size_t query = url.find('?');
      const std::string metrics =
          url.substr(0, query) + "metrics" + (query == std::string::npos ? "" : url.substr(query));
      std::cerr << "cohort run: dashboard at " << url << " (metrics at " << metrics << ")" << std::endl;
      if (!dir.empty()) {
        const std::string path = dir + "/dashboard.url";
        std::ofstream f(path, std::ios::trunc);
        f << url << "\n";
        if (!o.dashboard_token.empty()) ::chmod(path.c_str(), 0600);  // the token is in it
      }
    }
#else
    std::cerr << "cohort run: warning: this cohort was built without the dashboard; the event log is written "
                 "to the run directory"
              << std::endl;
#endif
  }
  return m;
}

JobMonitor::JobMonitor(Coordinator& coordinator) : coordinator_(coordinator) {}

std::unique_ptr<JobMonitor> JobMonitor::follow(Coordinator& coordinator) {
  return std::unique_ptr<JobMonitor>(new JobMonitor(coordinator));
}

JobMonitor::~JobMonitor() {
  if (hub_) hub_->close();  // ends the live streams, so that the server's threads join at once
}

void JobMonitor::worker_message(const nlohmann::json& message) {
  if (hub_) {
    hub_->worker_message(message, node_rank_);
  } else {
    coordinator_.forward_monitor(message, node_rank_);
  }
}

void JobMonitor::tick() {
  if (!hub_) return;
  const double now = wall_now();
  hub_->tick(now);
  if (now >= next_machine_sample_) {
    next_machine_sample_ = now + 1;
    if (const auto load = machine_.sample()) hub_->machine_sample(now, load->cores, load->busy_cores, load->steal_cores);
  }
}

void JobMonitor::round_started(const Assignment& a) {
  node_rank_ = a.node_rank;
  if (hub_) hub_->round_started(a.round, a.world_size, a.restarts);
}

void JobMonitor::round_failed(const Outcome& outcome) {
  if (!hub_) return;
  if (outcome.failure) {
    const RoundFailure& f = *outcome.failure;
    hub_->job_event("failure", first_line(f.summary),
                    {{"rank", f.who.rank},
                     {"node", f.who.node_rank},
                     {"local_rank", f.who.local_rank},
                     {"pid", f.who.pid},
                     {"round", f.round()},
                     {"reason", f.how},
                     {"summary", f.summary}});
  } else if (outcome.kind == Outcome::peer_lost || (outcome.kind == Outcome::peer_stopped && !outcome.summary.empty())) {
    hub_->job_event("failure", first_line(outcome.summary), {{"reason", first_line(outcome.summary)}});
  }
}

void JobMonitor::restarting(const std::string& notice, int restarts) {
  if (!hub_) return;
  const std::string line = first_line(notice);
  hub_->job_event("restart", line, {{"restarts", restarts}, {"reason", line}});
}

void JobMonitor::replaced(const std::string& notice, int rank, int generation, int restarts, const std::string& spare) {
  if (!hub_) return;
  const std::string line = first_line(notice);
  nlohmann::json fields = {{"rank", rank}, {"generation", generation}, {"restarts", restarts}, {"reason", line}};
  if (!spare.empty()) fields["spare"] = spare;
  hub_->job_event("replaced", line, fields);
}

void JobMonitor::finished(int exit_code) {
  if (!hub_ || finished_) return;
  finished_ = true;
  const std::string state = exit_code == 0 ? "succeeded" : exit_code >= 128 ? "interrupted" : "failed";
  // The leading agent's own CPU time (the hub, the dashboard, the relay): what monitoring costs
  // on the agent's side, next to the workers' monitor_s (bench/monitor_overhead.sh reads both).
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  const double agent_cpu_s = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                             static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  hub_->job_event("finished", "job " + state + " (exit code " + std::to_string(exit_code) + ")",
                  {{"exit_code", exit_code}, {"state", state}, {"agent_cpu_s", agent_cpu_s}});
}

}  // namespace cohort::launcher
