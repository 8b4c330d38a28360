// A fake worker for the monitoring tests of `cohort run`: no torch, no training — it sends the
// "metrics" (and "event") datagrams a worker's cohort::monitor() would send to COHORT_AGENT_SOCKET,
// with numbers chosen by its flags, so that the agent's side (worker link → hub → events.jsonl,
// /metrics, forwarding between nodes) is tested fast and exactly.
//
//   metrics_probe [--steps N] [--step-ms M] [--slow-rank R --slow-ms S --slow-phase P]
//                 [--nan-step K --nan-rank R [--nan-event]] [--die-rank R --die-step K]
//                 [--hold-ms M]
// Every rank reports steps 0..N-1, sleeping --step-ms between them; --slow-rank's phase P is S ms
// longer and the others wait that long in comm_wait (as synchronous training would). --nan-rank's
// loss is "nan" at step K (with --nan-event, it also sends the anomaly event a worker sends).
// --die-rank SIGKILLs itself after step K (in round 0 only: a restarted job then succeeds). --hold-ms: stay alive this long after the last step.
// It prints COHORT_ON_NAN as "on_nan=<value>" (the launcher passes --on-nan that way).
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, step_ms = 5, slow_rank = -1, slow_ms = 0, nan_step = -1, nan_rank = 0, die_rank = -1, die_step = -1,
      hold_ms = 0;
  bool nan_event = false;
  std::string slow_phase = "backward";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--steps") steps = std::stoi(next());
    else if (a == "--step-ms") step_ms = std::stoi(next());
    else if (a == "--slow-rank") slow_rank = std::stoi(next());
    else if (a == "--slow-ms") slow_ms = std::stoi(next());
    else if (a == "--slow-phase") slow_phase = next();
    else if (a == "--nan-step") nan_step = std::stoi(next());
    else if (a == "--nan-rank") nan_rank = std::stoi(next());
    else if (a == "--nan-event") nan_event = true;
    else if (a == "--die-rank") die_rank = std::stoi(next());
    else if (a == "--die-step") die_step = std::stoi(next());
    else if (a == "--hold-ms") hold_ms = std::stoi(next());
    else {
      std::fprintf(stderr, "metrics_probe: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const int rank = env_int("COHORT_RANK", 0), world = env_int("COHORT_WORLD_SIZE", 1);
  const int restart = env_int("COHORT_RESTART_COUNT", 0);
  const char* on_nan = std::getenv("COHORT_ON_NAN");
  std::printf("on_nan=%s\n", on_nan ? on_nan : "");
  std::fflush(stdout);
  const char* path = std::getenv("COHORT_AGENT_SOCKET");
  if (path == nullptr) {
    std::fprintf(stderr, "metrics_probe: no COHORT_AGENT_SOCKET\n");
    return 3;
  }
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::strncpy(to.sun_path, path, sizeof(to.sun_path) - 1);
  auto send = [&](const nlohmann::json& m) {
    const std::string text = m.dump();
    sendto(fd, text.data(), text.size(), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  };
  const double slow_s = slow_ms / 1000.0;
  for (int s = 0; s < steps; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    nlohmann::json phases{{"data", 0.001}, {"forward", 0.004}, {"backward", 0.004}, {"optimizer", 0.001}};
    const double step_s = 0.012 + (slow_rank >= 0 ? slow_s : 0);
    if (rank == slow_rank) phases[slow_phase] = phases[slow_phase].get<double>() + slow_s;
    double busy = 0;
    for (auto& [k, v] : phases.items()) busy += v.get<double>();
    phases["comm_wait"] = step_s - busy;
    nlohmann::json m{{"type", "metrics"},  {"pid", getpid()},      {"rank", rank},         {"world_size", world},
                     {"restart", restart}, {"step", s},            {"t", wall_now()},      {"step_s", step_s},
                     {"phases", phases},   {"samples", 32},        {"samples_per_s", 32 / step_s},
                     {"grad_norm", 0.5},   {"rss_bytes", 50 << 20}, {"comm_bytes", 4096},  {"comm_s", 0.002},
                     {"busbw", 2048000.0}};
    const bool nan = s == nan_step && rank == nan_rank;
    m["scalars"] = {{"loss", nan ? nlohmann::json("nan") : nlohmann::json(2.0 - s * 0.01)}, {"lr", 0.05}};
    if (nan && nan_event) {
      send({{"type", "event"}, {"pid", getpid()}, {"rank", rank}, {"t", wall_now()}, {"kind", "anomaly"},
            {"anomaly", "nan"}, {"what", "loss"}, {"policy", on_nan ? on_nan : "stop"}, {"step", s},
            {"message", "rank " + std::to_string(rank) + ": loss is NaN at step " + std::to_string(s)}});
    }
    send(m);
    if (rank == die_rank && s == die_step && restart == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last datagram is read first
      raise(SIGKILL);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  return 0;
}
