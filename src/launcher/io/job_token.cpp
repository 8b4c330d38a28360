// The job's secret: read, made, shared, derived. See job_token.h.
#include "launcher/io/job_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cohort/error.h"
#include "launcher/watch/job_monitor.h"
#include "runtime/net/message_auth.h"

namespace cohort::launcher {
namespace {

constexpr size_t kMaxJobTokenLength = 4096;

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

void check_length(const std::string& token, const std::string& source) {
  if (token.size() < kMinJobTokenLength || token.size() > kMaxJobTokenLength) {
    throw ConfigError(-1, source + " holds " + std::to_string(token.size()) + " characters; a job token needs " +
                              std::to_string(kMinJobTokenLength) + " to " + std::to_string(kMaxJobTokenLength) +
                              " (make one with: openssl rand -hex 32)");
  }
}

std::string read_token_file(const std::string& path) {
  const std::string flag = "--job-token-file " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block us
  if (fd < 0) throw ConfigError(-1, flag + ": " + std::strerror(errno));
  struct stat st {};
  std::string text;
  std::string problem;
  if (fstat(fd, &st) != 0) {
    problem = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    problem = std::string("other users may read or change it (mode ") + mode + "); chmod 600 " + path;
  } else if (st.st_size > static_cast<off_t>(kMaxJobTokenLength + 64)) {
    problem = std::to_string(st.st_size) + " bytes is too long for a token";
  } else {
    char buf[kMaxJobTokenLength + 64];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0 && text.size() <= kMaxJobTokenLength) text.append(buf, static_cast<size_t>(n));
    if (n < 0) problem = std::strerror(errno);
  }
  ::close(fd);
  if (!problem.empty()) throw ConfigError(-1, flag + ": " + problem);
  return trimmed(text);
}

}  // namespace

void load_job_token(RunOptions& o) {
  if (!o.job_token_file.empty()) {
    o.job_token = read_token_file(o.job_token_file);
    check_length(o.job_token, "--job-token-file " + o.job_token_file);
  } else if (const char* t = std::getenv("COHORT_JOB_TOKEN"); t && *t) {
    o.job_token = trimmed(t);
    check_length(o.job_token, "COHORT_JOB_TOKEN");
  }
  // The workers (the user's program, and whatever it starts) inherit this environment: they get a
  // key derived for their one purpose (worker_job_key), never the token that signs agent messages.
  ::unsetenv("COHORT_JOB_TOKEN");
}

void ensure_private_job_token(RunOptions& o) {
  if (o.job_token.empty()) o.job_token = detail::random_hex(32);
}

void ensure_shared_job_token(RunOptions& o) {
  if (!o.job_token.empty()) return;
  o.run_dir = run_directory(o);  // the same directory the monitor uses later
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  const std::string path = o.run_dir + "/job-token";
  ::unlink(path.c_str());  // a run directory given again: a new job, a new token
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const std::string token = detail::random_hex(32);
  const std::string text = token + "\n";
  const bool written = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!written) {
    throw ConfigError(-1, "no job token was given, and making one in " + path + " failed (" + std::strerror(err) +
                              "); pass --job-token-file (make one with: openssl rand -hex 32)");
  }
  o.job_token = token;
  o.job_token_file = path;
  std::cerr << "cohort run: this job's token is in " << path
            << " (made now, readable by you only): copy it to the other nodes over a channel you trust (e.g. scp) "
               "and start them with --job-token-file <the copy>, or with COHORT_JOB_TOKEN set to its contents"
            << std::endl;
}

void require_job_token(const RunOptions& o, const std::string& who) {
  if (!o.job_token.empty()) return;
  throw ConfigError(-1, who + " has no job token: start it with --job-token-file holding a copy of the token node 0 "
                              "made (its cohort run printed where), or set COHORT_JOB_TOKEN; every node of a job "
                              "needs the same one");
}

std::string worker_job_key(const RunOptions& o) { return detail::derive_key(o.job_token, "checkpoint parts"); }

}  // namespace cohort::launcher
