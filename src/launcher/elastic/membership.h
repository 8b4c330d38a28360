// launcher/elastic/membership.h — the rules of an elastic job's membership, apart from any socket: who sits
// in the next round and where, and when a rendezvous that waits for nodes may form the round.
//
// Node order: every agent gets an id when it joins (the host is 0, then in order of arrival) and
// keeps it while it lives. A round seats the first MAX nodes by id and numbers them 0, 1, ... in
// that order, ranks node by node; so the nodes that stay keep their order (a node that leaves
// moves the ones after it up), and a node that comes back comes last.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

namespace cohort::launcher {

struct Candidate {
  int id;     // join order, for the node's life
  int nproc;  // its workers
};

struct Seat {
  int id;
  int node_rank;
  int rank_base;  // global rank of its local rank 0
};

struct Seating {
  std::vector<Seat> seats;  // in node-rank order
  int world_size = 0;
};

/// Seats the first `max_nodes` candidates by id; the rest stay spares.
Seating seat_nodes(std::vector<Candidate> candidates, int max_nodes);

/// When a rendezvous may form its round: at once with MAX nodes; with at least MIN, once the
/// count has stayed at MIN or more for the settle time (more nodes may be on their way).
class Gathering {
 public:
  using Clock = std::chrono::steady_clock;
  Gathering(int min_nodes, int max_nodes, double settle_s) : min_(min_nodes), max_(max_nodes), settle_s_(settle_s) {}

  /// `present`: the nodes there now (the host included). True when the round should form.
  bool ready(int present, Clock::time_point now);
  /// Milliseconds until the settle window closes (-1: no window open), for poll().
  int ms_to_settle(Clock::time_point now) const;

 private:
  int min_, max_;
  double settle_s_;
  std::optional<Clock::time_point> min_reached_;
};

}  // namespace cohort::launcher
