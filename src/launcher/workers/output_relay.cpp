// Whole-line, rank-prefixed relay of worker output. See output_relay.h.
#include "launcher/workers/output_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::launcher {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a longer "line" is cut, so one worker cannot hog memory

void write_fully(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // console gone (EPIPE): keep supervising, the log file still gets the lines
    }
  }
}

}  // namespace

OutputRelay::OutputRelay(int rank, const std::string& log_path, size_t tail_lines)
    : prefix_("[" + std::to_string(rank) + "] "), tail_lines_(tail_lines) {
  if (!log_path.empty()) {
    log_fd_ = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd_ < 0) {
      throw ConfigError(-1, "cannot write the log file " + log_path + ": " + std::strerror(errno));
    }
  }
}

OutputRelay::~OutputRelay() {
  if (log_fd_ >= 0) close(log_fd_);
}

void OutputRelay::emit(std::string& batch, const std::string& line) {
  batch += prefix_;
  batch += line;
  batch += '\n';
  if (log_fd_ >= 0) write_fully(log_fd_, line + "\n");
  tail_.push_back(line);
  if (tail_.size() > tail_lines_) tail_.pop_front();
}

bool OutputRelay::pump(int fd, Stream stream) {
  char buf[65536];
  bool open = true;
  std::string batch;
  std::string& partial = partial_[stream];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      break;
    }
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      partial.append(buf + start, i - start);
      emit(batch, partial);
      partial.clear();
      start = i + 1;
    }
    partial.append(buf + start, static_cast<size_t>(n) - start);
    if (partial.size() >= kMaxLine) {
      emit(batch, partial);
      partial.clear();
    }
  }
  if (!batch.empty()) write_fully(stream == out ? 1 : 2, batch);
  return open;
}

void OutputRelay::flush_partial() {
  for (Stream s : {out, err}) {
    if (partial_[s].empty()) continue;
    std::string batch;
    emit(batch, partial_[s]);
    partial_[s].clear();
    write_fully(s == out ? 1 : 2, batch);
  }
}

}  // namespace cohort::launcher
