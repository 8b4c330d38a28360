// hub/outputs/event_log_writer.h — the run's JSONL event log (<run_dir>/events.jsonl): one line per
// metrics record and per event, appended and flushed line by line, so that a reader (a test,
// `cohort dashboard RUN_DIR`, tail -f) sees every line as soon as it happened.
//
// The log is a by-product: it must never stop the job. When the file cannot be opened, or a write
// fails (a full disk), one warning goes to stderr and logging stops for the rest of the run.
// Not thread-safe: the hub calls it under its mutex (which also keeps the lines in order).
#pragma once

#include <cstdio>
#include <string>

namespace cohort::hub {

class EventLogWriter {
 public:
  /// Opens `path` for appending; an empty path: nothing is written. Never throws.
  explicit EventLogWriter(const std::string& path);
  ~EventLogWriter();
  EventLogWriter(const EventLogWriter&) = delete;
  EventLogWriter& operator=(const EventLogWriter&) = delete;

  /// Appends `line` and a newline, flushed. False once logging has stopped (or never started).
  bool write(const std::string& line);
  bool active() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  void fail(const std::string& what, int error);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace cohort::hub
