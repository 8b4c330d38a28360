// Small socket helpers for choosing addresses. No torch. Internal header.
#pragma once

#include <string>

namespace cohort::detail {

/// The local IP address this machine uses to reach `host` (routing table lookup through an
/// unconnected UDP socket; nothing is sent). Empty when `host` cannot be resolved or routed.
std::string local_address_towards(const std::string& host);

/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

}  // namespace cohort::detail
