// Survivors keep running. See cohort/keep_running.h.
#include "cohort/keep_running.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cohort/context.h"
#include "cohort/error.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/log.h"

namespace cohort {
namespace {

std::atomic<int> g_rejoins{0};

// A communication failure may be a peer's death; any other error is this rank's own.
bool may_be_peer_failure(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const CommError&) {
    return true;
  } catch (const TimeoutError&) {
    return true;
  } catch (const Error&) {
    return false;  // configuration, checkpoint, anomaly: not a peer's
  } catch (const std::exception&) {
    return true;  // c10d's and Gloo's own ("Connection closed by peer", "Timed out")
  } catch (...) {
    return false;
  }
}

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  } catch (...) {
    return "an unknown exception";
  }
}

double rejoin_wait_s(const KeepRunningOptions& options, int rank) {
  const char* v = std::getenv("COHORT_REJOIN_WAIT_S");
  if (v == nullptr) return options.rejoin_wait_s;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s < 0 || s > 1e6)
    throw ConfigError(rank, std::string("COHORT_REJOIN_WAIT_S='") + v + "' is not a number of seconds");
  return s;
}

struct Rejoinable {
  Rejoinable() { detail::set_rejoinable(true); }
  ~Rejoinable() { detail::set_rejoinable(false); }
};

}  // namespace

int rejoins() { return g_rejoins.load(); }

void keep_running(const std::shared_ptr<Context>& ctx, const std::function<void()>& body, KeepRunningOptions options) {
  if (!ctx) throw ConfigError(-1, "keep_running needs the Context from cohort::init()");
  const double wait_s = rejoin_wait_s(options, ctx->rank());
  // The agent replaces a failed peer in place only while every survivor says it can rejoin:
  // inside keep_running (every cohort object reconnects, Context::rejoin).
  Rejoinable announced;
  for (;;) {
    std::exception_ptr error;
    try {
      body();
      return;
    } catch (...) {
      error = std::current_exception();
    }
    detail::AgentLink* link = detail::agent_link();
    if (ctx->world_size() == 1 || link == nullptr || !may_be_peer_failure(error))
      std::rethrow_exception(error);
    struct Rejoining {  // the agent's hang rule gives this time (agent_link.h)
      Rejoining() { detail::set_rejoining(true); }
      ~Rejoining() { detail::set_rejoining(false); }
    } rejoining;
    const std::string what = message_of(error);
    detail::log_warn("a collective failed (" + what + "); waiting up to " + std::to_string(static_cast<int>(wait_s)) +
                     " s for the agent to replace the lost peer");
    const auto generation = link->wait_for_rejoin(
        ctx->generation(), std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
    if (!generation) std::rethrow_exception(error);  // no repair: the failure is the job's
    ctx->rejoin(*generation);
    g_rejoins.fetch_add(1);
  }
}

}  // namespace cohort
