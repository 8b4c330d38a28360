// The hub's Prometheus exposition (Hub::prometheus_text, GET /metrics): which families and series
// the job's state becomes, names and help texts as docs/monitoring.md lists them. Read-only; the
// text format's syntax (escaping, number spelling) is prometheus_text.*, the state is hub/state.h.
#include <optional>

#include "hub/state.h"
#include "hub/outputs/prometheus_text.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

namespace {
const char* const kRankStates[] = {"starting", "running", "slow", "stalled", "restarting", "failed", "finished"};
const char* const kJobStates[] = {"starting", "running", "restarting", "succeeded", "failed", "interrupted"};
}  // namespace

std::string Hub::prometheus_text() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  PrometheusText p;
  const std::string& job = s.job_name;
  const Labels base{{"job", job}};
  auto with = [&](Labels extra) {
    Labels l = base;
    l.insert(l.end(), extra.begin(), extra.end());
    return l;
  };
  p.family("cohort_up", "gauge", "1 while the agent that serves this endpoint runs.");
  p.sample(base, 1);
  p.family("cohort_world_size", "gauge", "Ranks in the current round.");
  p.sample(base, s.world_size);
  p.family("cohort_restarts_total", "counter", "Restarts of the job after a worker failure.");
  p.sample(base, s.restarts);
  p.family("cohort_recovery_steps_lost_total", "counter", "Steps the job went back in its recoveries from failures.");
  p.sample(base, static_cast<double>(s.steps_lost_total));
  p.family("cohort_last_recovery_seconds", "gauge", "From the last failure to the first step after it (0: none yet).");
  p.sample(base, s.last_recovery_seconds);
  p.family("cohort_job_state", "gauge", "1 for the job's current state, 0 for the others.");
  for (const char* st : kJobStates) p.sample(with({{"state", st}}), s.job_state == st ? 1 : 0);
  p.family("cohort_job_samples_per_second", "gauge", "Training samples per second of the whole job (sum over ranks).");
  {
    const json j = s.job_json();
    p.sample(base, j["samples_per_s"].is_number() ? j["samples_per_s"].get<double>() : 0.0);
  }
  auto per_rank = [&](const char* name, const char* type, const char* help, auto value_of) {
    p.family(name, type, help);
    for (const auto& [r, rs] : s.ranks) {
      if (auto v = value_of(rs)) p.sample(with({{"rank", std::to_string(r)}}), *v);
    }
  };
  using opt = std::optional<double>;
  per_rank("cohort_rank_step", "gauge", "The latest step a rank reported.",
           [](const State::RankState& rs) -> opt { return rs.step >= 0 ? opt(static_cast<double>(rs.step)) : std::nullopt; });
  per_rank("cohort_rank_steps_total", "counter", "Steps a rank reported during this run (all rounds).",
           [](const State::RankState& rs) -> opt { return static_cast<double>(rs.steps_total); });
  p.family("cohort_rank_state", "gauge", "1 for a rank's current state, 0 for the others.");
  for (const auto& [r, rs] : s.ranks) {
    for (const char* st : kRankStates) p.sample(with({{"rank", std::to_string(r)}, {"state", st}}), rs.state == st ? 1 : 0);
  }
  per_rank("cohort_step_seconds", "gauge", "Duration of a rank's last step.",
           [](const State::RankState& rs) { return number_at(rs.last, "step_s"); });
  p.family("cohort_phase_seconds", "gauge", "Time of a rank's last step spent in each phase.");
  for (const auto& [r, rs] : s.ranks) {
    if (!rs.last.is_object() || !rs.last.contains("phases") || !rs.last["phases"].is_object()) continue;
    for (const auto& [phase, v] : rs.last["phases"].items()) {
      if (auto d = number(v)) p.sample(with({{"rank", std::to_string(r)}, {"phase", phase}}), *d);
    }
  }
  per_rank("cohort_samples_per_second", "gauge", "Samples per second a rank processed in its last step.",
           [](const State::RankState& rs) { return number_at(rs.last, "samples_per_s"); });
  per_rank("cohort_grad_norm", "gauge", "Global L2 norm of the averaged gradients at a rank's last step.",
           [](const State::RankState& rs) { return number_at(rs.last, "grad_norm"); });
  per_rank("cohort_resident_memory_bytes", "gauge", "Resident memory of a rank's process.",
           [](const State::RankState& rs) { return number_at(rs.last, "rss_bytes"); });
  per_rank("cohort_cuda_memory_bytes", "gauge", "CUDA memory allocated by a rank's caching allocator.",
           [](const State::RankState& rs) { return number_at(rs.last, "cuda_bytes"); });
  per_rank("cohort_comm_bytes_total", "counter", "Bytes of collectives a rank completed during this run.",
           [](const State::RankState& rs) -> opt { return rs.comm_bytes_total; });
  per_rank("cohort_allreduce_busbw_bytes_per_second", "gauge",
           "Allreduce bus bandwidth of a rank's last step: bytes/comm time x 2(n-1)/n.",
           [](const State::RankState& rs) { return number_at(rs.last, "busbw"); });
  per_rank("cohort_gradient_compression_ratio", "gauge",
           "Gradient bytes a DDP communication hook was given over the bytes it sent, at a rank's last step.",
           [](const State::RankState& rs) { return number_at(rs.last, "compression"); });
  p.family("cohort_scalar", "gauge", "The scalars a rank gave at its last step (loss, lr, ...).");
  for (const auto& [r, rs] : s.ranks) {
    if (!rs.last.is_object() || !rs.last.contains("scalars") || !rs.last["scalars"].is_object()) continue;
    for (const auto& [name, v] : rs.last["scalars"].items()) {
      if (auto d = number(v)) p.sample(with({{"rank", std::to_string(r)}, {"name", name}}), *d);
    }
  }
  p.family("cohort_anomalies_total", "counter", "Anomalies detected during this run, by kind.");
  for (const char* k : {"nan", "loss_spike", "straggler", "stall"}) {
    auto it = s.anomalies_total.find(k);
    p.sample(with({{"kind", k}}), it == s.anomalies_total.end() ? 0 : static_cast<double>(it->second));
  }
  for (const auto& [k, n] : s.anomalies_total) {
    if (k != "nan" && k != "loss_spike" && k != "straggler" && k != "stall") p.sample(with({{"kind", k}}), static_cast<double>(n));
  }
  p.family("cohort_events_total", "counter", "Events logged during this run, by kind.");
  for (const auto& [k, n] : s.events_total) p.sample(with({{"kind", k}}), static_cast<double>(n));
  return p.text();
}

}  // namespace cohort::hub
