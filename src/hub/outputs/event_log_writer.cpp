// The JSONL event log. See event_log_writer.h.
#include "hub/outputs/event_log_writer.h"

#include <cerrno>
#include <cstring>
#include <iostream>

namespace cohort::hub {

EventLogWriter::EventLogWriter(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  file_ = std::fopen(path_.c_str(), "ae");  // append, close-on-exec: workers never inherit it
  if (file_ == nullptr) fail("cannot open", errno);
}

EventLogWriter::~EventLogWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

bool EventLogWriter::write(const std::string& line) {
  if (file_ == nullptr) return false;
  errno = 0;
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fputc('\n', file_) != EOF &&
                  std::fflush(file_) == 0;
  if (!ok) {
    const int error = errno;
    std::fclose(file_);  // may fail again (what was buffered); nothing more is written either way
    file_ = nullptr;
    fail("cannot write", error);
  }
  return ok;
}

void EventLogWriter::fail(const std::string& what, int error) {
  std::cerr << "cohort run: warning: " << what << " the event log " << path_ << ": "
            << (error != 0 ? std::strerror(error) : "unknown error")
            << "; the job goes on without it (no further events or metrics are logged)" << std::endl;
}

}  // namespace cohort::hub
