// launcher/static/coordinators.h — the coordinators of a job on several machines (see coordinator.h).
//
// Star-shaped: node 0's agent holds one connection to every other node's agent (made by the
// rendezvous, which answered each node with {"type":"start","round":0,...}). Every message names
// the round it is about; a message about another round is ignored.
//   member → node 0:  {"type":"done","round":r}                  its workers all succeeded
//                     {"type":"fail","round":r,"failure":{...},"summary":...}
//                                                                a worker failed there
//                     {"type":"abort","round":r,"summary":...}   it stops the job for good (interrupted,
//                                                                could not start its workers)
//                     {"type":"stopped","round":r}               after a restart decision: its workers
//                                                                of round r are all gone
//                     {"type":"rejoinable","round":r,"value":b}  --keep-survivors: whether all its workers
//                                                                train in keep_running() (on a change)
//                     {"type":"repair","round":r,"failure":{...},"summary":...}
//                                                                a worker failed there; may it replace
//                                                                it alone? (answered by "rejoin" or "stop")
//   node 0 → members: {"type":"stop","round":r,"restart":b,"summary":...,"failure":{...}}
//                                                                round r is over, stop your workers;
//                                                                b: round r+1 follows, else exit
//                     {"type":"start","round":r+1,"world_size":W,"rank_base":B}
//                                                                every node stopped: start round r+1
//                     {"type":"finish","round":r}                every node is done: exit 0
//                     {"type":"rejoin","round":r,"rank":k,"node":n,"generation":G,"restarts":R,"failure":{...}}
//                                                                --keep-survivors: node n replaces rank k
//                                                                alone; every node's workers rejoin as G
// Node 0 grants a repair (recovery/repair.h) while restarts are left and every other node said its
// workers are all rejoinable; it numbers the generations of the round, so that all nodes agree.
// Node 0 decides about every round (the first failure it hears of ends the round) and sends that
// failure along, so every node agrees on the round number and prints the same history. A
// connection that closes before "finish" means that agent is gone: the job fails, no restart.
// This is a static job's protocol; an elastic job's (heartbeats, a new world at "start") is in
// elastic/coordinators.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/io/channel.h"
#include "launcher/coordinator.h"
#include "launcher/config/options.h"

namespace cohort::launcher {

struct PeerLink {
  int node_rank;
  int rank_base;  // global rank of the node's local rank 0
  std::unique_ptr<Channel> channel;
};

/// Node 0's side, with one link per other node; `first` is node 0's own place in round 0.
std::unique_ptr<Coordinator> make_host_coordinator(std::vector<PeerLink> members, Assignment first,
                                                   const RunOptions& options);

/// Another node's side, with its link to node 0 (`where` names node 0's address in messages).
std::unique_ptr<Coordinator> make_member_coordinator(std::unique_ptr<Channel> host, const std::string& where,
                                                     Assignment first, const RunOptions& options);

}  // namespace cohort::launcher
