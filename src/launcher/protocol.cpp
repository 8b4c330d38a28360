// Shared pieces of the agents' protocol. See protocol.h.
#include "launcher/protocol.h"

namespace cohort::launcher {

nlohmann::json failure_to_json(const RoundFailure& f) {
  return {{"round", f.round()}, {"rank", f.who.rank}, {"node_rank", f.who.node_rank}, {"local_rank", f.who.local_rank},
          {"pid", f.who.pid},   {"how", f.how},       {"time_ms", f.time_ms},           {"summary", f.summary}};
}

std::optional<RoundFailure> failure_from(const nlohmann::json& message) {
  auto it = message.find("failure");
  if (it == message.end() || !it->is_object()) return std::nullopt;
  RoundFailure f;
  f.who.restart_count = it->value("round", 0);
  f.who.rank = it->value("rank", 0);
  f.who.node_rank = it->value("node_rank", 0);
  f.who.local_rank = it->value("local_rank", 0);
  f.who.pid = it->value("pid", int64_t{0});
  f.how = it->value("how", "");
  f.time_ms = it->value("time_ms", int64_t{0});
  f.summary = it->value("summary", "");
  return f;
}

std::string repair_notice(const RoundFailure& failure, const RepairGrant& grant, int max_restarts) {
  return "cohort run: rank " + std::to_string(grant.rank) + " (node " + std::to_string(grant.node) + ") " +
         failure.how + "; node " + std::to_string(grant.node) + " replaces it, the ranks here rejoin (generation " +
         std::to_string(grant.generation) + ", restart " + std::to_string(grant.restarts) + " of " +
         std::to_string(max_restarts) + ")\n";
}

}  // namespace cohort::launcher
