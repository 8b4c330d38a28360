// The cost of one collective, alpha-beta per link level (latency + bytes / bandwidth), for the
// algorithms cohort has or plans: a flat ring over every worker (Gloo's and NCCL's ring), a
// pipelined binary tree, hierarchical (reduce inside the node, ring between one leader per node,
// broadcast back), and the shared-memory path of one node. Formulas as in "Bandwidth optimal
// all-reduce algorithms" (Patarasuk & Yuan 2009) and NCCL's performance notes: a ring moves
// 2(n-1)/n of the bytes over its slowest link, so its bus bandwidth is that link's. No torch.
#pragma once

#include "params.h"

namespace cohort::sim {

struct Topology {
  int nodes = 1;
  int workers_per_node = 1;
  int world() const { return nodes * workers_per_node; }
};

/// Seconds for an allreduce of `bytes` (on the wire, after compression) with `algo`;
/// Algorithm::best takes the fastest of those that apply.
double allreduce_s(const Params& p, const Topology& t, Algorithm algo, double bytes);
/// Reduce-scatter or allgather of `bytes` in all (each worker ends with / starts from bytes/n):
/// half a ring allreduce's traffic; hierarchical (and shm, best when faster): inside the node
/// through shared memory, then between nodes one ring per local rank.
double reduce_scatter_s(const Params& p, const Topology& t, Algorithm algo, double bytes);
inline double allgather_s(const Params& p, const Topology& t, Algorithm algo, double bytes) {
  return reduce_scatter_s(p, t, algo, bytes);
}

/// The algorithm `best` picks for these bytes (ring, tree, hierarchical or shm).
Algorithm best_algorithm(const Params& p, const Topology& t, double bytes);

/// Bus bandwidth of an allreduce that took `seconds`: bytes / seconds x 2(n-1)/n (NCCL's definition,
/// the one cohort's monitor reports).
double bus_bandwidth(double bytes, double seconds, int world);

}  // namespace cohort::sim
