// launcher/io/waiting.h — waiting with a deadline: poll the signal pipe and some channels, and
// the arithmetic of deadlines. Used by the rendezvous and the coordinators of both kinds of job.
#pragma once

#include <poll.h>

#include <chrono>
#include <vector>

#include "launcher/io/channel.h"

namespace cohort::launcher {

class SignalPipe;

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
