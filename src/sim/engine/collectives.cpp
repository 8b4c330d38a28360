// Alpha-beta costs of the collectives (see collectives.h for the sources of the formulas).
#include "collectives.h"

#include <algorithm>
#include <cmath>

namespace cohort::sim {
namespace {

struct Link {
  double alpha;
  double beta;
};

// The slowest link a flat ring over every worker crosses: a ring ordered by node crosses each NIC
// once in each direction, so the NIC is shared by one flow, whatever the workers per node.
Link ring_link(const Params& p, const Topology& t) {
  if (t.nodes > 1) return {std::max(p.inter_latency_s, p.intra_latency_s), std::min(p.inter_bw, p.intra_bw)};
  return {p.intra_latency_s, p.intra_bw};
}

double ring_allreduce(Link l, int n, double bytes) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * l.alpha + 2.0 * (n - 1) / n * bytes / l.beta;
}

double tree_allreduce(Link l, int n, double bytes) {
  if (n <= 1) return 0;
  // Reduce up and broadcast down a binary tree, pipelined in chunks: 2 log2(n) latencies, and the
  // bytes cross the slowest link twice.
  return 2.0 * std::ceil(std::log2(static_cast<double>(n))) * l.alpha + 2.0 * bytes / l.beta;
}

double shm_allreduce(const Params& p, int w, double bytes) {
  if (w <= 1) return 0;
  // cohort's shared-memory path: every worker reduces its 1/w slice from all inputs, then every
  // worker copies the reduced slices back (a reduce-scatter and an allgather through memory).
  return 2.0 * p.shm_latency_s + 2.0 * (w - 1) / w * bytes / p.shm_bw;
}

double hierarchical_allreduce(const Params& p, const Topology& t, double bytes) {
  const int w = t.workers_per_node;
  double s = 0;
  if (w > 1) {
    // Reduce into the leader through shared memory, and broadcast back the same way.
    s += p.shm_latency_s + (w - 1.0) / w * bytes / p.shm_bw;
    s += p.shm_latency_s + bytes / p.shm_bw;
  }
  s += ring_allreduce({p.inter_latency_s, p.inter_bw}, t.nodes, bytes);  // one leader per node
  return s;
}

}  // namespace

double allreduce_s(const Params& p, const Topology& t, Algorithm algo, double bytes) {
  if (t.world() <= 1 || bytes <= 0) return 0;
  switch (algo) {
    case Algorithm::ring: return ring_allreduce(ring_link(p, t), t.world(), bytes);
    case Algorithm::tree: return tree_allreduce(ring_link(p, t), t.world(), bytes);
    case Algorithm::hierarchical: return hierarchical_allreduce(p, t, bytes);
    case Algorithm::shm:
      if (t.nodes == 1) return shm_allreduce(p, t.workers_per_node, bytes);
      return hierarchical_allreduce(p, t, bytes);  // after an elastic change of shape: the same path between nodes
    case Algorithm::best: return allreduce_s(p, t, best_algorithm(p, t, bytes), bytes);
  }
  return 0;
}

Algorithm best_algorithm(const Params& p, const Topology& t, double bytes) {
  Algorithm best = Algorithm::ring;
  double best_s = allreduce_s(p, t, Algorithm::ring, bytes);
  const Algorithm others[] = {Algorithm::tree, Algorithm::hierarchical, Algorithm::shm};
  for (Algorithm a : others) {
    if (a == Algorithm::shm && t.nodes > 1) continue;
    const double s = allreduce_s(p, t, a, bytes);
    if (s < best_s) {
      best_s = s;
      best = a;
    }
  }
  return best;
}

double reduce_scatter_s(const Params& p, const Topology& t, Algorithm algo, double bytes) {
  const int n = t.world();
  if (n <= 1 || bytes <= 0) return 0;
  const int w = t.workers_per_node;
  const Link ring = ring_link(p, t);
  const double flat = (n - 1) * ring.alpha + (n - 1.0) / n * bytes / ring.beta;
  // Two levels: a reduce-scatter through shared memory inside the node, then one ring between
  // the nodes per local rank, each on 1/w of the bytes (together the node's bytes over its NIC).
  double two_level = 0;
  if (w > 1) two_level += p.shm_latency_s + (w - 1.0) / w * bytes / p.shm_bw;
  if (t.nodes > 1) two_level += (t.nodes - 1) * p.inter_latency_s + (t.nodes - 1.0) / t.nodes * bytes / p.inter_bw;
  switch (algo) {
    case Algorithm::ring:
    case Algorithm::tree: return flat;  // no tree reduce-scatter: the ring
    case Algorithm::hierarchical:
    case Algorithm::shm: return two_level;
    case Algorithm::best: return std::min(flat, two_level);
  }
  return flat;
}

double bus_bandwidth(double bytes, double seconds, int world) {
  if (seconds <= 0 || world <= 1) return 0;
  return bytes / seconds * 2.0 * (world - 1) / world;
}

}  // namespace cohort::sim
