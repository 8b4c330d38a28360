// launcher/io/channel.h — one TCP connection between two agents, carrying JSON messages one per line,
// each authenticated with the job's token.
//
// Messages (all objects with a "type"): join, start, reject (rendezvous.cpp); done, fail, stop,
// finish (static/coordinators.h); for elastic jobs also beat, wait, stopped, end
// (elastic/coordinators.h); "monitor" (a worker's metrics or event forwarded to the leading agent,
// job_monitor.h) is the one kind that may be lost: it is sent with send_droppable().
//
// On the wire (docs/security.md): each side first sends "cohort-hello-1 <nonce>" (16 random bytes,
// hex); then every message is "<mac> <json>", the HMAC-SHA256 (message_auth.h) under a key derived
// from the job token of the sender's nonce, the receiver's nonce, the message's number on this
// connection and the JSON. The receiver's fresh nonce makes a message recorded on one connection
// worthless on any other; the number makes one replayed, dropped or reordered within a connection
// fail. A line that fails is never acted on: the connection is dropped, named once on stderr, and
// the peer told why in one plain line ("cohort-refused <why>") that its agent quotes in its error.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace cohort::launcher {

class Channel {
 public:
  /// Takes ownership of `fd` (made non-blocking) and sends this side's hello. `token`: the job's
  /// secret (job_token.h), the same on every agent of the job.
  Channel(int fd, const std::string& token);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int fd() const { return fd_; }
  /// False when the peer is gone. Thread-safe (elastic jobs send heartbeats from a thread of
  /// their own, heartbeat.h); receive() is for one thread. The first send waits (up to 10 s) for
  /// the peer's hello, which a peer sends as soon as it has the connection.
  bool send(const nlohmann::json& message);
  /// Sends a message that may be lost, never waiting: it is queued behind what is still unsent,
  /// and dropped (false) when more than `limit` bytes already wait, or while another thread is
  /// sending, or before the peer's hello came. send() sends the queue first (waiting, as it does
  /// for its own message).
  bool send_droppable(const nlohmann::json& message, size_t limit = 1 << 20);
  /// Sends what of the droppable queue the socket takes now, never waiting. False: peer gone.
  bool flush();
  /// Droppable messages lost so far.
  size_t dropped() const { return dropped_; }
  /// Reads what is available and appends the complete, authentic messages to `out`. Returns false
  /// once the peer closed the connection or sent something that is not an authentic message
  /// (messages before it are still returned).
  bool receive(std::vector<nlohmann::json>& out);
  /// Why the peer refused this side's messages, when it said so before closing; else empty.
  std::string refusal() const;
  /// Most bytes receive() holds while a line is incomplete: a peer that sends more is refused.
  /// Before the peer's hello it is 4 KiB whatever this says. A rendezvous host lowers it for a
  /// connection that has not joined yet (io/doorway.h), so that strangers cannot make it hold much.
  static constexpr size_t kBufferLimit = size_t{1} << 24;
  void set_buffer_limit(size_t bytes);
  /// Ends the talk with a peer that is not wanted: names it once on stderr, tells it why in one
  /// plain line (never waiting). The caller then closes the channel.
  void refuse(const std::string& why);

 private:
  bool learn_peer_nonce(int wait_ms);  // takes read_mu_; true once the peer's hello is in
  bool take_hello_locked();            // read_mu_ held: the hello off the front of buffer_
  std::string sealed(const std::string& text);  // send_mu_ held: "<mac> <text>\n", numbered
  bool flush_locked();                 // send_mu_ held

  int fd_;
  std::string key_;              // derived from the job token: signs and checks messages
  std::string own_nonce_;
  uint64_t sent_ = 0;            // messages sent (send_mu_)
  uint64_t received_ = 0;        // messages received (read_mu_)
  std::string buffer_;           // received bytes not yet taken (read_mu_)
  size_t buffer_limit_ = kBufferLimit;  // (read_mu_)
  std::string peer_nonce_;       // empty until the peer's hello (read_mu_)
  std::string refusal_;          // (read_mu_)
  std::string unsent_;           // droppable messages (and the rest of a partly sent one), oldest first
  std::atomic<size_t> dropped_{0};
  std::mutex send_mu_;           // whole messages: a heartbeat never lands inside another message
  mutable std::mutex read_mu_;
};

}  // namespace cohort::launcher
