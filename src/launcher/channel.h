// launcher/channel.h — one TCP connection between two agents, carrying JSON messages one per line.
//
// Messages (all objects with a "type"): join, start, reject (rendezvous.cpp); done, fail, stop,
// finish (peer_coordinators.h); for elastic jobs also beat, wait, stopped, end
// (elastic_coordinators.h); "monitor" (a worker's metrics or event forwarded to the leading agent,
// job_monitor.h) is the one kind that may be lost: it is sent with send_droppable().
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
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
  /// Sends a message that may be lost, never waiting: it is queued behind what is still unsent,
  /// and dropped (false) when more than `limit` bytes already wait, or while another thread is
  /// sending. send() sends the queue first (waiting, as it does for its own message).
  bool send_droppable(const nlohmann::json& message, size_t limit = 1 << 20);
  /// Sends what of the droppable queue the socket takes now, never waiting. False: peer gone.
  bool flush();
  /// Droppable messages lost so far.
  size_t dropped() const { return dropped_; }
  /// Reads what is available and appends the complete messages to `out`. Returns false once the
  /// peer closed the connection or sent something that is not a message (messages before the
  /// end are still returned).
  bool receive(std::vector<nlohmann::json>& out);

 private:
  int fd_;
  bool flush_locked();  // send_mu_ held
  std::string buffer_;
  std::string unsent_;   // droppable messages (and the rest of a partly sent one), oldest first
  std::atomic<size_t> dropped_{0};
  std::mutex send_mu_;  // whole messages: a heartbeat never lands inside another message
};

}  // namespace cohort::launcher
