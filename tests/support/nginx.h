// A real nginx (Debian's) serving a folder on a loopback port, for the tests of remote data sets:
// started by the test with its own configuration in a temp folder (pid, logs and temp paths
// there; `user root;` where the test runs as root), in the foreground and as one process
// (`master_process off`), so that kill() stops the whole server at once and start() brings it back
// on the same port. Its access log says which files were asked for. No torch.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/files.h"
#include "support/subprocess.h"

namespace cohort::testing {

class Nginx {
 public:
  /// Serves `root` at http://127.0.0.1:PORT/ (a free port) until destroyed.
  explicit Nginx(const std::string& root) : root_(root), dir_("cohort_nginx") {
    for (int attempt = 0; attempt < 5; ++attempt) {  // the free port can be taken before nginx binds it
      port_ = free_port();
      if (start()) return;
    }
    throw std::runtime_error("nginx did not start; its error log: " + slurp(dir_.path() + "/error.log"));
  }
  ~Nginx() { kill(); }
  Nginx(const Nginx&) = delete;
  Nginx& operator=(const Nginx&) = delete;

  int port() const { return port_; }
  /// http://127.0.0.1:PORT/
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  /// Stops the server at once (SIGKILL): connections are refused from then on.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// Starts it (again) on its port; false if it exited (the port taken) or did not listen within 10 s.
  bool start() {
    write_config();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string conf = dir_.path() + "/nginx.conf";
      ::execl("/usr/sbin/nginx", "nginx", "-p", dir_.path().c_str(), "-c", conf.c_str(), "-e",
              (dir_.path() + "/error.log").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (listening()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    return false;
  }
  /// The access log's text (a line per request: "GET /path HTTP/1.1" ...).
  std::string access_log() const { return slurp(dir_.path() + "/access.log"); }

 private:
  bool listening() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return ok;
  }
  void write_config() const {
    const std::string d = dir_.path();
    std::ofstream c(d + "/nginx.conf");
    if (::geteuid() == 0) c << "user root;\n";  // nginx refuses to drop to www-data's rights over a root-owned temp dir
    c << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\nerror_log " << d
      << "/error.log;\nevents { worker_connections 64; }\nhttp {\n  access_log " << d << "/access.log;\n"
      << "  client_body_temp_path " << d << "/body;\n  proxy_temp_path " << d << "/proxy;\n  fastcgi_temp_path " << d
      << "/fastcgi;\n  uwsgi_temp_path " << d << "/uwsgi;\n  scgi_temp_path " << d << "/scgi;\n"
      << "  default_type application/octet-stream;\n  sendfile on;\n"
      << "  server { listen 127.0.0.1:" << port_ << "; root " << root_ << "; }\n}\n";
  }
  std::string root_;
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace cohort::testing
