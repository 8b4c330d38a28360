// Replay (`cohort dashboard RUN_DIR`): the lines of an events.jsonl a hub wrote, fed back through
// the same apply functions as live inputs (hub.cpp) with `replaying` set. Nothing is logged again
// and the detectors raise no events (the logged anomaly events do that), but they still update the
// rank states (a straggler that recovered has no event of its own) — so a replayed hub shows what
// the live one showed. Replayed lines are streamed to subscribers, so a page follows a log that is
// still growing. Not here: finding the new lines of a growing file (tools/dashboard_command.cpp).
#include <cerrno>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "cohort/error.h"
#include "hub/state.h"
#include "runtime/json_fields.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

size_t Hub::State::replay(std::istream& in) {
  std::lock_guard<std::mutex> lock(mu);
  replaying = true;
  size_t lines = 0;
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty()) continue;
    ++lines;
    const json line = cohort::detail::parse_capped_or_discarded(text);
    if (!line.is_object()) continue;  // a torn last line of a killed agent
    const std::string type = text_at(line, "type");
    if (type == "metrics") {
      if (!integer_at(line, "rank") || !integer_at(line, "step") || *integer_at(line, "rank") < 0) continue;
      publish("metrics", text);
      apply_metrics(line, number_at(line, "t").value_or(0));
    } else if (type == "event") {
      if (!line.contains("kind") || !line["kind"].is_string()) continue;
      publish("event", text);
      apply_event(line);
    }
  }
  replaying = false;  // nothing above throws (parse errors are discarded lines)
  return lines;
}

size_t Hub::replay_file(const std::string& path) {
  struct stat st {};  // before opening: a FIFO would block the open until a writer came
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw ConfigError(-1, "the event log " + path + " is not a regular file (cohort run writes it as one)");
  std::ifstream in(path);
  if (!in) throw ConfigError(-1, "cannot read the event log " + path + ": " + std::strerror(errno));
  return state_->replay(in);
}

size_t Hub::replay_text(const std::string& lines) {
  std::istringstream in(lines);
  return state_->replay(in);
}

}  // namespace cohort::hub
