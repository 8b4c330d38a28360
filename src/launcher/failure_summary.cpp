// Exit descriptions and the failure summary. See failure_summary.h.
#include "launcher/failure_summary.h"

#include <sys/wait.h>

#include <cstring>
#include <string>

namespace cohort::launcher {

bool exited_ok(int s) { return WIFEXITED(s) && WEXITSTATUS(s) == 0; }

std::string describe_exit(int s) {
  if (WIFEXITED(s)) return "exited with code " + std::to_string(WEXITSTATUS(s));
  if (WIFSIGNALED(s)) {
    int sig = WTERMSIG(s);
    const char* abbrev = sigabbrev_np(sig);  // "KILL"
    const char* text = strsignal(sig);       // "Killed"
    std::string out = "was killed by signal " + std::to_string(sig) + " (";
    out += abbrev ? std::string("SIG") + abbrev : "unknown";
    if (text) out += std::string(": ") + text;
    out += ")";
    if (WCOREDUMP(s)) out += ", core dumped";
    return out;
  }
  return "ended with wait status " + std::to_string(s);
}

std::string describe_end(const WorkerFailure& f) { return f.hang.empty() ? describe_exit(f.wait_status) : f.hang; }

std::string failure_summary(const WorkerFailure& f) {
  std::string r = std::to_string(f.who.rank);
  std::string out = "cohort run: job failed: rank " + r + " (node " + std::to_string(f.who.node_rank) +
                    ", local rank " + std::to_string(f.who.local_rank) + ", pid " + std::to_string(f.who.pid) +
                    ") " + describe_end(f) + "\n";
  if (!f.flight_records.empty()) {
    out += "  flight records of node " + std::to_string(f.who.node_rank) + "'s ranks (their last collectives): " +
           f.flight_records + "\n";
  }
  if (f.last_lines.empty()) {
    out += "  rank " + r + " printed nothing (output still in its stdio buffer is lost when a process dies)\n";
  } else {
    out += "  last " + std::to_string(f.last_lines.size()) + " line" + (f.last_lines.size() == 1 ? "" : "s") +
           " of rank " + r + "'s output:\n";
    for (const auto& line : f.last_lines) out += "    [" + r + "] " + line + "\n";
  }
  return out;
}

}  // namespace cohort::launcher
