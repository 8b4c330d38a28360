// parallel/pipeline/schedule.h — a pipeline schedule as data (issue 47): one list of actions per
// rank, made here for GPipe, 1F1B, interleaved 1F1B (Megatron-LM's order) and ZB-H1 (the
// zero-bubble paper), checked by check_schedule() (schedule_check.h), and meant to be run by one
// executor and costed by the simulator from the same lists. No torch: a list is plain data, so the
// checker, the simulator and the tests see exactly what the ranks will run.
//
// Stages: S = p·v stages over p ranks; stage s lives on rank s % p (Megatron's interleaved
// placement: rank r holds stages r, r+p, r+2p, ...; with v = 1 stage s is rank s).
// Communication is explicit: a send follows the compute that produces the tensor, a receive comes
// right before the compute that needs it, and only between stages on different ranks. Sends do not
// wait for their receive (the executor posts them and waits at the step's end); receives block.
// Not here: running the lists (an executor over a pp process group) and timing them on real costs.
#pragma once

#include <string>
#include <vector>

namespace cohort::pipeline {

enum class ActionKind {
  forward,          // "F": stage s's forward of microbatch i (stashes its activations)
  input_grad,       // "B": the gradient of the stage's input only (zero-bubble split)
  weight_grad,      // "W": the stage's weight gradients, after its B (zero-bubble split)
  full_backward,    // "BW": input and weight gradients together (GPipe, 1F1B, interleaved)
  send_activation,  // "SEND_F": stage s's output of microbatch i to stage s+1's rank
  recv_activation,  // "RECV_F": stage s's input of microbatch i from stage s-1's rank
  send_gradient,    // "SEND_B": the gradient of stage s's input to stage s-1's rank
  recv_gradient,    // "RECV_B": the gradient of stage s's output from stage s+1's rank
};

struct Action {
  ActionKind kind;
  int stage;       // the global stage 0..S-1 the action belongs to (on a send/receive: see above)
  int microbatch;  // 0..m-1
  bool operator==(const Action& o) const {
    return kind == o.kind && stage == o.stage && microbatch == o.microbatch;
  }
};

enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, zb_h1 };

struct Schedule {
  ScheduleKind kind;
  int ranks = 0;            // p: pipeline ranks
  int stages_per_rank = 1;  // v: virtual stages (model chunks) per rank
  int microbatches = 0;     // m
  std::vector<std::vector<Action>> actions;  // per rank, in the order the rank runs them

  int stages() const { return ranks * stages_per_rank; }
  int rank_of(int stage) const { return stage % ranks; }
};

/// Whether an action computes (F, B, W, BW) rather than moves a tensor.
bool is_compute(ActionKind kind);
/// "F", "B", "W", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
const char* kind_code(ActionKind kind);
/// "{stage}{code}{microbatch}", as torch.distributed.pipelining writes actions: "1F3", "0SEND_B2".
std::string to_string(const Action& action);
/// In words, for messages: "forward of stage 1, microbatch 3".
std::string describe(const Action& action);
/// One line per rank, its actions separated by commas (torch.distributed.pipelining's _dump_csv).
std::string to_csv(const Schedule& schedule);

/// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1".
const char* schedule_name(ScheduleKind kind);
/// The kind for a --schedule value; throws ConfigError (one line, naming `rank` when >= 0 and the
/// known names) for any other.
ScheduleKind parse_schedule_name(const std::string& name, int rank = -1);

/// The lists of `kind` for p ranks, v stages per rank and m microbatches. Throws ConfigError with
/// one line naming `rank` (when >= 0) and the numbers when the schedule cannot use them: p, v or m
/// below 1, v > 1 for a schedule without virtual stages, m not a multiple of p for interleaved 1F1B
/// with v > 1 (Megatron-LM's requirement: its microbatches go round the ranks in groups of p).
Schedule make_schedule(ScheduleKind kind, int ranks, int stages_per_rank, int microbatches, int rank = -1);

}  // namespace cohort::pipeline
