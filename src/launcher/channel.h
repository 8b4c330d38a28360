// launcher/channel.h — one TCP connection between two agents, carrying JSON messages one per line.
//
// Messages (all objects with a "type"): join, start, reject (rendezvous.cpp); done, fail, stop,
// finish (peer_coordinators.h); for elastic jobs also beat, wait, stopped, end
// (elastic_coordinators.h).
#pragma once

#include <nlohmann/json.hpp>

#include <mutex>
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
  /// False when the peer is gone. Thread-safe (elastic jobs send heartbeats from a thread of
  /// their own, heartbeat.h); receive() is for one thread.
  bool send(const nlohmann::json& message);
  /// Reads what is available and appends the complete messages to `out`. Returns false once the
  /// peer closed the connection or sent something that is not a message (messages before the
  /// end are still returned).
  bool receive(std::vector<nlohmann::json>& out);

 private:
  int fd_;
  std::string buffer_;
  std::mutex send_mu_;  // whole messages: a heartbeat never lands inside another message
};

}  // namespace cohort::launcher
