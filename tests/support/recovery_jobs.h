// The fault-tolerance tests' shared parts (recovery_test.cpp, survivors_test.cpp): the
// Fashion-MNIST example under `cohort run` in the background, its workers found by their
// checkpoint directory, signals at random moments, and what its output and event log say.
// No torch: these tests start processes and read their output.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/subprocess.h"

extern char** environ;

namespace cohort::testing::recovery {

using cohort::testing::contains;
using cohort::testing::run_shell;

inline const std::string kExample = COHORT_FASHION_MNIST;
// Steps of every faulty run and its uninterrupted twin: enough for the faults to come before the
// end. Each start trains for a random 0.2-1.5 s after its first step before its fault, and a
// restart without spares takes ~0.8 s more; at up to 20 steps/s on this machine five faults take
// up to ~230 steps; 300 leaves the margin (160 once did, when a step took 75 ms).
inline const std::string kSteps = "--max-steps 300";

inline bool have_dataset() { return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good(); }

inline std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using cohort::testing::count;

inline std::string final_state(const std::string& output) {
  std::regex re("\"optimizer_checksum\":\"([0-9a-f]{16})\",\"param_checksum\":\"([0-9a-f]{16})\"");
  std::string out;
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    out += (*it)[1].str() + "/" + (*it)[2].str() + " ";
  return out;
}

// The job in the background with its output in a file.
struct Job {
  pid_t pid = -1;
  std::string log;
  Job(const std::string& command, const std::string& log_path) : log(log_path) {
    const std::string shell = command + " >" + log_path + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", shell.c_str(), nullptr};
    if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) pid = -1;
  }
  bool running() { return pid > 0 && ::waitpid(pid, &status_, WNOHANG) == 0; }
  int wait() {
    if (pid > 0 && ::waitpid(pid, &status_, 0) == pid) pid = -pid;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  ~Job() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  int status_ = 0;
};

// The pids of the job's workers (both ranks), found by their unique checkpoint directory: the
// program's first flag.
inline std::vector<pid_t> worker_pids(const std::string& ckpt_dir, const std::string& program = kExample) {
  std::vector<pid_t> out;
  // Anchored at the program's path: the launcher's and the shell's command lines contain it too.
  std::istringstream in(run_shell("pgrep -f -- '^" + program + " --ckpt-dir " + ckpt_dir + " '").output);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

// The job's training workers: those that mapped a shared-memory allreduce's segment
// (/dev/shm/cohort-<pid>-<n>: one machine's, or a node's in the hierarchical allreduce), which the
// warm spares waiting in init() have not.
inline std::vector<pid_t> training_workers(const std::string& ckpt_dir, const std::string& program = kExample) {
  std::vector<pid_t> out;
  const std::regex segment("/dev/shm/cohort-[0-9]+-[0-9]+");
  for (pid_t p : worker_pids(ckpt_dir, program))
    if (std::regex_search(read_all("/proc/" + std::to_string(p) + "/maps"), segment)) out.push_back(p);
  return out;
}

// Whether a committed checkpoint exists (retention keeps the newest, so look for any).
inline bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (std::filesystem::exists(entry.path() / "manifest.json")) return true;
  return false;
}

// Sends `sig` to one of the job's two workers, chosen at random, `times` times: each time once the
// job's current start has trained (its first step is done) and `ready` says so, after a random
// [min_ms, max_ms] more — a random step, during or between saves. Returns the signals sent.
inline int signal_at_random_moments(Job& job, const std::string& ckpt, int sig, int times, unsigned seed, int min_ms,
                             int max_ms, const std::function<bool()>& ready = [] { return true; }) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> after_ms(min_ms, max_ms);
  int sent = 0;
  for (int start = 1; sent < times && job.running();) {
    if (count(read_all(job.log), "first_step_unix_ns") < static_cast<size_t>(start) || !ready()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const auto pids = worker_pids(ckpt);
    if (pids.size() != 2 || !job.running()) continue;
    ::kill(pids[rng() % 2], sig);
    ++sent;
    ++start;
  }
  return sent;
}

inline std::vector<int64_t> steps_lost_per_restore(const std::string& events_path) {
  std::vector<int64_t> lost;
  int64_t newest = 0;
  const std::regex step("\"step\":(\\d+)");
  std::ifstream in(events_path);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, step)) continue;
    const int64_t s = std::stoll(m[1].str());
    if (contains(line, "\"type\":\"metrics\"")) newest = std::max(newest, s);
    if (contains(line, "\"kind\":\"checkpoint_restored\"")) lost.push_back(newest - s);
  }
  return lost;
}

// A process's environment variable as it was started (empty when unset or the process is gone).
inline std::string started_with(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  return "";
}

}  // namespace cohort::testing::recovery
