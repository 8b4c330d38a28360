// cohort/error.h — the exceptions cohort throws.
//
// Two kinds of failure (see docs/ARCHITECTURE.md, Conventions):
//  * recoverable faults — bad input, an unreachable peer, a timeout, an I/O error — are thrown as
//    cohort::Error subclasses that a caller or the launcher can act on;
//  * broken internal invariants go through COHORT_CHECK, which names both sides of the comparison.
// Every message starts with "rank R: " (or "cohort: " before the rank is known) so that a line in a log of many ranks says where it came from.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace cohort {

/// Base of every error cohort throws on purpose.
class Error : public std::runtime_error {
 public:
  /// An error on `rank` (-1 when it is not known yet); what() is `what` after "rank R: " (or
  /// "cohort: " for -1).
  Error(int rank, const std::string& what)
      : std::runtime_error((rank >= 0 ? "rank " + std::to_string(rank) : std::string("cohort")) + ": " +
                           what),
        rank_(rank) {}
  /// The rank the error happened on, or -1 when it was not known yet (a bad environment).
  int rank() const { return rank_; }

 private:
  int rank_;
};

/// Bad input: a half-set environment, an invalid option, models that differ across ranks,
/// a missing file. Retrying does not help; the message says what to change.
class ConfigError : public Error {
  using Error::Error;
};

/// A peer or service did not answer in time (store, collective).
class TimeoutError : public Error {
  using Error::Error;
};

/// A collective or the connection to a peer failed.
class CommError : public Error {
  using Error::Error;
};

/// Saving or restoring a checkpoint failed: a full disk, a missing or corrupt file. Training can
/// carry on; nothing partial is left visible.
class CheckpointError : public Error {
  using Error::Error;
};

/// Training produced a NaN or infinite gradient norm or loss and the policy is on_nan=stop
/// (cohort/monitor.h). Thrown on every rank alike (the averaged gradients are the same
/// everywhere); restarting from the last checkpoint usually meets the same values again.
class AnomalyError : public Error {
  using Error::Error;
};

}  // namespace cohort
