// launcher/protocol.h — pieces the two sides of the agents' protocol share (see
// static/coordinators.h): a failure record as JSON, and waiting on channels between rounds.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "launcher/round.h"

namespace cohort::launcher {

nlohmann::json failure_to_json(const RoundFailure& failure);
/// The "failure" member of a message, if it has one.
std::optional<RoundFailure> failure_from(const nlohmann::json& message);

/// The round a message is about (-1 when it names none).
inline int round_of(const nlohmann::json& message) { return message.value("round", -1); }

}  // namespace cohort::launcher
