// launcher/static/protocol.h — pieces the two sides of the agents' protocol share (see
// static/coordinators.h): a failure record as JSON, and waiting on channels between rounds.
#pragma once

#include <poll.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "launcher/io/channel.h"
#include "launcher/round.h"

namespace cohort::launcher {

class SignalPipe;

nlohmann::json failure_to_json(const RoundFailure& failure);
/// The "failure" member of a message, if it has one.
std::optional<RoundFailure> failure_from(const nlohmann::json& message);

/// The round a message is about (-1 when it names none).
inline int round_of(const nlohmann::json& message) { return message.value("round", -1); }

/// True when poll() marked `fd` readable, hung up or in error.
bool is_ready(const std::vector<pollfd>& fds, int fd);

/// Polls the signal pipe and the channels (null entries skipped) for up to timeout_ms; throws
/// Interrupted. Returns the polled descriptors for is_ready().
std::vector<pollfd> wait_for_channels(const std::vector<Channel*>& channels, SignalPipe& signals, int timeout_ms);

/// Milliseconds until `deadline`, at least 0.
int ms_left(std::chrono::steady_clock::time_point deadline);

/// now + seconds.
std::chrono::steady_clock::time_point deadline_in(double seconds);

}  // namespace cohort::launcher
