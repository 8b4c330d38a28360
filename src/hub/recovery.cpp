// Recoveries, as the hub sees them (issue 19): a failure event, the next round, its restore
// (checkpoint_restored, from rank 0) and the first step of that round make one "recovered" event:
// what failed, where the training state came from (an in-memory snapshot, a checkpoint on disk,
// or nothing: a fresh start), how many steps the job went back, and the seconds from the failure
// to that first step. The page lists it with the other events; the log keeps it for the simulator
// and for `cohort dashboard RUN_DIR`, which replays it rather than deriving it again.
#include <algorithm>
#include <cstdio>

#include "hub/state.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

void Hub::State::recovery_event(const json& line) {
  const std::string kind = text_at(line, "kind");
  if (kind == "failure") {
    if (!recovering)  // a round's first failure is its cause; the others follow from it
      recovering = Recovery{text_at(line, "reason", text_at(line, "message")), number_at(line, "t").value_or(0)};
  } else if (kind == "round_started" || kind == "replaced") {  // a new round, or one worker replaced in it
    if (recovering) {
      recovering->restarted = true;
      recovering->in_place = kind == "replaced";
    }
  } else if (kind == "checkpoint_restored") {
    if (recovering && recovering->restarted) recovering->restored = line;
  } else if (kind == "finished") {
    recovering.reset();  // the job ended instead
  } else if (kind == "recovered") {  // made below, or read back from a log in replay
    steps_lost_total += std::max<int64_t>(0, integer_at(line, "steps_lost").value_or(0));
    last_recovery_seconds = number_at(line, "seconds").value_or(0);
  }
}

void Hub::State::recovery_progress(int64_t step, double t) {
  if (!recovering || !recovering->restarted) return;
  if (recovering->in_place && !recovering->restored.is_object()) return;  // a survivor's step from before
  const Recovery r = std::move(*recovering);
  recovering.reset();
  if (replaying) return;
  const bool restored = r.restored.is_object();
  // The worker sends an event's fields at the top level and under "fields" (worker_monitor.cpp).
  const json& restore_fields = restored && r.restored.contains("fields") && r.restored["fields"].is_object()
                                   ? r.restored["fields"]
                                   : r.restored;
  const int64_t restored_step = restored ? integer_at(r.restored, "step").value_or(0) : 0;
  const std::string source = restored ? text_at(restore_fields, "source", "checkpoint") : "none";
  const int64_t lost = std::max<int64_t>(0, newest_step - restored_step);
  const double seconds = std::max(0.0, t - r.failed_at);
  json fields = {{"cause", r.cause},          {"source", source},     {"restored_step", restored_step},
                 {"steps_lost", lost},        {"seconds", seconds},   {"step", step}};
  if (restored) {
    fields["path"] = text_at(restore_fields, "path");
    if (auto s = number_at(restore_fields, "seconds")) fields["restore_seconds"] = *s;
  }
  char took[48];
  std::snprintf(took, sizeof(took), "recovered in %.2f s", seconds);
  const std::string from = source == "snapshot"     ? "an in-memory snapshot of step " + std::to_string(restored_step)
                           : source == "checkpoint" ? "the checkpoint of step " + std::to_string(restored_step)
                                                    : "the start (nothing to restore)";
  record_event(event_line("recovered",
                          std::string(took) + " from " + from + ", " + std::to_string(lost) + " step" +
                              (lost == 1 ? "" : "s") + " lost; cause: " + r.cause,
                          std::move(fields), t));
}

}  // namespace cohort::hub
