// launcher/channel.h — one TCP connection between two agents, carrying JSON messages one per line.
//
// Messages (all objects with a "type"): join, start, reject (rendezvous.cpp); done, fail, stop,
// finish (peer_coordinators.cpp). Later: heartbeat, restart rounds, membership changes.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cohort::launcher {

class Channel {
 public:
  explicit Channel(int fd);  // takes ownership; made non-blocking
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int fd() const { return fd_; }
  /// False when the peer is gone.
  bool send(const nlohmann::json& message);
  /// Reads what is available and appends the complete messages to `out`. Returns false once the
  /// peer closed the connection or sent something that is not a message (messages before the
  /// end are still returned).
  bool receive(std::vector<nlohmann::json>& out);

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace cohort::launcher
