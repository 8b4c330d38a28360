// Small socket helpers for choosing addresses. No torch. Internal header.
#pragma once

#include <string>

namespace cohort::detail {

/// The local IP address this machine uses to reach `host` (routing table lookup through an
/// unconnected UDP socket; nothing is sent). Empty when `host` cannot be resolved or routed.
std::string local_address_towards(const std::string& host);

/// Polls a TCP connect to host:port every few milliseconds until something accepts it or `timeout_ms`
/// passes; returns whether it was reached. (c10d's TCPStore client in libtorch 1.13 sleeps a whole
/// second after a refused connect, which at start-up, when all ranks start together, costs a
/// second; probing first makes the store's own connect succeed at once.)
bool wait_until_listening(const std::string& host, int port, long timeout_ms);

/// Empty when `host` resolves to an address; otherwise the resolver's reason ("Name or service not
/// known").
std::string resolve_problem(const std::string& host);

/// A TCP socket bound to `host`:`port` (that address only, SO_REUSEADDR) and listening with
/// `backlog`; -1 when it cannot be, with *problem saying why and *error (when given) the errno of
/// the step that failed (EADDRINUSE, EADDRNOTAVAIL, ...; 0 when `host` did not resolve).
int listen_on(const std::string& host, int port, int backlog, std::string* problem, int* error = nullptr);

/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

}  // namespace cohort::detail
