// launcher/workers/output_relay.h — a worker's output to the console, prefixed with its rank, in whole lines.
//
// Each worker's stdout and stderr arrive on pipes; bytes are cut into lines and every complete line
// goes out as "[rank] line\n" to the launcher's stdout (or stderr), all lines of one read in one
// write(), so lines of different ranks never mix mid-line. A line still open when the worker ends
// is completed with a newline. Each line is also appended, unprefixed, to the rank's log file when
// a log directory is given, and the last lines are kept for the failure summary.
#pragma once

#include <deque>
#include <string>

namespace cohort::launcher {

class OutputRelay {
 public:
  /// log_path empty: no log file. Throws cohort::ConfigError when the log file cannot be opened.
  OutputRelay(int rank, const std::string& log_path, size_t tail_lines);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  enum Stream { out = 0, err = 1 };

  /// Reads everything available on `fd` (non-blocking) and relays the complete lines.
  /// Returns false once the pipe reached end-of-file.
  bool pump(int fd, Stream stream);

  /// Relays the unfinished line of each stream (called when the worker is gone).
  void flush_partial();

  /// The last lines the worker printed, oldest first.
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void emit(std::string& batch, const std::string& line);

  std::string prefix_;
  int log_fd_ = -1;
  size_t tail_lines_;
  std::string partial_[2];
  std::deque<std::string> tail_;
};

}  // namespace cohort::launcher
