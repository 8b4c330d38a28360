// The four schedules' lists. Each generator writes only the compute order of every rank;
// add_communication() then puts each send right after the compute that produces its tensor and each
// receive right before the compute that needs it. Every rank therefore sends and receives along a
// link in the order of its own computes, and the generators keep those orders alike on both ends
// (all ranks run microbatches in the same order), which check_schedule() verifies.
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "cohort/error.h"

namespace cohort::pipeline {
namespace {

using Order = std::vector<Action>;

Action act(ActionKind kind, int stage, int mb) { return Action{kind, stage, mb}; }

// GPipe: every forward, then every backward (Huang et al. 2019): m microbatches stashed at once.
Order gpipe(int r, int m) {
  Order out;
  for (int i = 0; i < m; ++i) out.push_back(act(ActionKind::forward, r, i));
  for (int i = 0; i < m; ++i) out.push_back(act(ActionKind::full_backward, r, i));
  return out;
}

// 1F1B (PipeDream-Flush, Narayanan et al. 2021): p-r-1 forwards to fill the pipe, then one forward
// and one backward in turn, then the remaining backwards. At most p-r microbatches stashed on rank r.
// With `split`, ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", figure 3): each backward
// is B then W, and rank r leaves out the W of its first r steady steps; those W's run after the
// last B, where 1F1B's rank r would wait for the pipe to drain. Same stashes as 1F1B.
Order one_f_one_b(int p, int r, int m, bool split) {
  Order out;
  const int warmup = std::min(p - r - 1, m);
  int next_w = 0;
  auto backward = [&](int i) { out.push_back(act(split ? ActionKind::input_grad : ActionKind::full_backward, r, i)); };
  for (int i = 0; i < warmup; ++i) out.push_back(act(ActionKind::forward, r, i));
  for (int k = 0; k < m - warmup; ++k) {
    out.push_back(act(ActionKind::forward, r, warmup + k));
    backward(k);
    if (split && k >= r) out.push_back(act(ActionKind::weight_grad, r, next_w++));
  }
  for (int i = m - warmup; i < m; ++i) {
    backward(i);
    if (split) out.push_back(act(ActionKind::weight_grad, r, next_w++));
  }
  while (split && next_w < m) out.push_back(act(ActionKind::weight_grad, r, next_w++));
  return out;
}

// Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving): the k-th forward
// of every rank runs chunk (k mod pv) / p on microbatch (k / pv)·p + k mod p, so microbatches go
// round the ranks in groups of p, chunk after chunk; backwards take the chunks in reverse. Warm-up:
// 2(p-r-1) + (v-1)p forwards, then one forward and one backward in turn, then the backwards.
Order interleaved(int p, int v, int r, int m) {
  const int total = v * m;
  const int group = p * v;
  auto mb = [&](int k) { return (k / group) * p + k % p; };
  auto forward_stage = [&](int k) { return ((k % group) / p) * p + r; };
  auto backward_stage = [&](int k) { return (v - 1 - (k % group) / p) * p + r; };
  const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
  Order out;
  for (int k = 0; k < warmup; ++k) out.push_back(act(ActionKind::forward, forward_stage(k), mb(k)));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(act(ActionKind::forward, forward_stage(warmup + k), mb(warmup + k)));
    out.push_back(act(ActionKind::full_backward, backward_stage(k), mb(k)));
  }
  for (int k = total - warmup; k < total; ++k)
    out.push_back(act(ActionKind::full_backward, backward_stage(k), mb(k)));
  return out;
}

// Sends after producers, receives before consumers, between stages on different ranks only.
std::vector<Action> add_communication(const Schedule& s, const Order& computes) {
  std::vector<Action> out;
  const int last = s.stages() - 1;
  auto remote = [&](int a, int b) { return s.rank_of(a) != s.rank_of(b); };
  for (const Action& a : computes) {
    const bool fwd = a.kind == ActionKind::forward;
    const bool bwd = a.kind == ActionKind::input_grad || a.kind == ActionKind::full_backward;
    if (fwd && a.stage > 0 && remote(a.stage, a.stage - 1))
      out.push_back(act(ActionKind::recv_activation, a.stage, a.microbatch));
    if (bwd && a.stage < last && remote(a.stage, a.stage + 1))
      out.push_back(act(ActionKind::recv_gradient, a.stage, a.microbatch));
    out.push_back(a);
    if (fwd && a.stage < last && remote(a.stage, a.stage + 1))
      out.push_back(act(ActionKind::send_activation, a.stage, a.microbatch));
    if (bwd && a.stage > 0 && remote(a.stage, a.stage - 1))
      out.push_back(act(ActionKind::send_gradient, a.stage, a.microbatch));
  }
  return out;
}

std::string normalized(const std::string& name) {
  std::string out;
  for (char c : name)
    if (c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

bool is_compute(ActionKind kind) {
  return kind == ActionKind::forward || kind == ActionKind::input_grad || kind == ActionKind::weight_grad ||
         kind == ActionKind::full_backward;
}

const char* kind_code(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward: return "F";
    case ActionKind::input_grad: return "B";
    case ActionKind::weight_grad: return "W";
    case ActionKind::full_backward: return "BW";
    case ActionKind::send_activation: return "SEND_F";
    case ActionKind::recv_activation: return "RECV_F";
    case ActionKind::send_gradient: return "SEND_B";
    case ActionKind::recv_gradient: return "RECV_B";
  }
  return "?";
}

std::string to_string(const Action& a) {
  return std::to_string(a.stage) + kind_code(a.kind) + std::to_string(a.microbatch);
}

std::string describe(const Action& a) {
  const char* what = "?";
  switch (a.kind) {
    case ActionKind::forward: what = "forward"; break;
    case ActionKind::input_grad: what = "input gradient (B)"; break;
    case ActionKind::weight_grad: what = "weight gradient (W)"; break;
    case ActionKind::full_backward: what = "backward"; break;
    case ActionKind::send_activation: what = "send of the activation"; break;
    case ActionKind::recv_activation: what = "receive of the activation"; break;
    case ActionKind::send_gradient: what = "send of the input gradient"; break;
    case ActionKind::recv_gradient: what = "receive of the output gradient"; break;
  }
  return std::string(what) + " of stage " + std::to_string(a.stage) + ", microbatch " + std::to_string(a.microbatch);
}

std::string to_csv(const Schedule& s) {
  std::ostringstream out;
  for (const auto& list : s.actions) {
    for (size_t i = 0; i < list.size(); ++i) out << (i ? "," : "") << to_string(list[i]);
    out << "\n";
  }
  return out.str();
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved_1f1b: return "interleaved-1f1b";
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "?";
}

ScheduleKind parse_schedule_name(const std::string& name, int rank) {
  const std::string n = normalized(name);
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b, ScheduleKind::zb_h1})
    if (n == normalized(schedule_name(k))) return k;
  throw ConfigError(rank, "unknown pipeline schedule '" + name +
                              "' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1)");
}

Schedule make_schedule(ScheduleKind kind, int p, int v, int m, int rank) {
  const std::string what = std::string("pipeline schedule ") + schedule_name(kind) + " (p=" + std::to_string(p) +
                           " pipeline ranks, v=" + std::to_string(v) + " stages per rank, m=" + std::to_string(m) +
                           " microbatches): ";
  if (p < 1 || v < 1 || m < 1) throw ConfigError(rank, what + "each must be at least 1");
  if (v > 1 && kind != ScheduleKind::interleaved_1f1b)
    throw ConfigError(rank, what + "only interleaved-1f1b runs several stages per rank");
  if (kind == ScheduleKind::interleaved_1f1b && v > 1 && m % p != 0)
    throw ConfigError(rank, what + "interleaved-1f1b needs the microbatches to be a multiple of the pipeline ranks (" +
                                std::to_string(p) + ")");
  Schedule s;
  s.kind = kind;
  s.ranks = p;
  s.stages_per_rank = v;
  s.microbatches = m;
  for (int r = 0; r < p; ++r) {
    Order computes;
    switch (kind) {
      case ScheduleKind::gpipe: computes = gpipe(r, m); break;
      case ScheduleKind::one_f_one_b: computes = one_f_one_b(p, r, m, false); break;
      // With one stage per rank, Megatron-LM runs the plain 1F1B: so do we.
      case ScheduleKind::interleaved_1f1b: computes = v == 1 ? one_f_one_b(p, r, m, false) : interleaved(p, v, r, m); break;
      case ScheduleKind::zb_h1: computes = one_f_one_b(p, r, m, true); break;
    }
    s.actions.push_back(add_communication(s, computes));
  }
  return s;
}

}  // namespace cohort::pipeline
