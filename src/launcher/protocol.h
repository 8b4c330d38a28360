// launcher/protocol.h — pieces of the agents' protocol that both kinds of job share, static
// (static/coordinators.h) and elastic (elastic/coordinators.h): a failure record as JSON and the
// round a message is about. Waiting on channels and deadlines is io/waiting.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "launcher/round.h"

namespace cohort::launcher {

nlohmann::json failure_to_json(const RoundFailure& failure);
/// The "failure" member of a message, if it has one.
std::optional<RoundFailure> failure_from(const nlohmann::json& message);

/// What a node prints when another node replaces a failed worker and its own workers rejoin
/// (--keep-survivors): "cohort run: rank 3 (node 1) was killed ...; node 1 replaces it, the ranks
/// here rejoin (generation 2, restart 2 of 8)\n".
std::string repair_notice(const RoundFailure& failure, const RepairGrant& grant, int max_restarts);

/// The round a message is about (-1 when it names none).
inline int round_of(const nlohmann::json& message) { return message.value("round", -1); }

}  // namespace cohort::launcher
