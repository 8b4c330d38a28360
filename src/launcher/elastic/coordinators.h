// launcher/elastic/coordinators.h — the agents of an elastic job (--rdzv-endpoint, --nnodes MIN:MAX):
// one hosts the rendezvous at the endpoint and decides about every round, the others join it.
//
// The host is the agent that listens at the endpoint (--rdzv-role auto: whichever agent can bind
// it — an address of its machine, the port free; host: must; member: never). It runs workers too,
// always as node 0, so global rank 0 and the workers' store are on its machine in every round
// (the store at the endpoint's address, --master-port or a free port the host picks once). The job
// cannot outlive its host: a member that loses it stops its workers and exits (exit 1) saying so.
//
// Star-shaped, JSON lines over one TCP connection per member (channel.h); both sides send
// {"type":"beat"} every --node-timeout/5 from a thread (heartbeat.h), and a side that hears nothing
// for --node-timeout, or sees the connection close, counts the other as lost.
//   member → host: {"type":"join","rdzv_id":ID,"min":m,"max":M,"nproc":n,"pid":p}
//                  {"type":"done"|"stopped","round":r}
//                  {"type":"fail","round":r,"failure":{...},"summary":S}   a worker failed there
//                  {"type":"abort","round":r,"summary":S}                  it ends the job (interrupt)
//   host → member: {"type":"reject","reason":S,"timeout":b}   wrong --rdzv-id or --nnodes; or, with
//                                                             timeout, MIN never reached (exit 3)
//                  {"type":"wait","note":S}                   joined; a place comes at the next round
//                  {"type":"start","round":r,"restarts":k,"world_size":W,"rank_base":B,"node_rank":n,
//                   "nnodes":N,"master_addr":A,"master_port":P,"notice":S,"failure":{...}}
//                  {"type":"stop","round":r}                  end the round: stop your workers, then
//                                                             say "stopped"; "start" or "end" follows
//                  {"type":"end","round":r,"summary":S,"failure":{...}}   the job is over (exit 1)
//                  {"type":"finish","round":r}                every node is done (exit 0)
//
// Rounds. The host forms round 0 once MIN nodes have joined and --rdzv-settle seconds passed
// without reaching MAX (at once at MAX); nobody by --rdzv-timeout: every agent exits 3. A round
// ends on the first of: a worker failure anywhere, a seated node lost (before it was done), a spare
// node joined while there is room (and no node is done yet), an interrupt anywhere. The host then
// sends "stop" and waits until every seated node stopped its workers (the barrier that lets the
// store keep its port), and only then decides — so that a node lost meanwhile is known first:
//   * a node was lost during the round → a membership change: the next round seats the nodes that
//     are left (waiting up to --rdzv-timeout for more when fewer than MIN are); workers that failed
//     because their peers vanished do not count as a restart;
//   * a spare joined → a membership change;
//   * otherwise a worker failure → a restart, while fewer than --max-restarts were used;
//   * an interrupt, restarts used up, MIN not regained → "end".
// Every round after the first has the next COHORT_RESTART_COUNT; only failure restarts count
// against --max-restarts (torchrun's rule: membership changes are not retries).
#pragma once

#include "launcher/static/rendezvous.h"

namespace cohort::launcher {

/// Round 0 of an elastic job, as the host (listener bound at the endpoint) or as a member.
/// Throws like rendezvous(); a member that waited as a spare until the job finished throws
/// JobFinished, one whose job ended meanwhile JobStopped.
RendezvousResult elastic_rendezvous(RunOptions& options, SignalPipe& signals);

// The two sides (elastic/host.cpp, elastic/member.cpp); `listener` is bound to the endpoint.
RendezvousResult host_elastic_job(const RunOptions& options, int listener, SignalPipe& signals);
RendezvousResult join_elastic_job(const RunOptions& options, SignalPipe& signals);

}  // namespace cohort::launcher
