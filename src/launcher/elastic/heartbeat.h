// launcher/elastic/heartbeat.h — the agents of an elastic job tell each other they are alive, so that a node
// that vanished without closing its connection (a cut link, a machine switched off, a stopped
// agent) is noticed within --node-timeout instead of after TCP's minutes of retransmissions.
//
// Sending runs on a thread of its own: the agent's loop can be busy for seconds (stopping workers
// waits up to --stop-timeout), and a busy agent is not a lost one. Receiving stays in the agent's
// loop: a Link notes when anything last arrived on it. Data that arrived while the loop was busy is
// still waiting in the socket when it looks again, so a busy receiver does not misjudge a sender.
// What this does not do: tell a dead peer from a cut link (both are silence), or watch workers
// (the supervisor's business).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "launcher/io/channel.h"

namespace cohort::launcher {

/// Sends {"type":"beat"} on every registered channel every `interval_s`.
class HeartbeatSender {
 public:
  explicit HeartbeatSender(double interval_s);
  ~HeartbeatSender();  // stops and joins the thread
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  void add(const std::shared_ptr<Channel>& channel);
  void remove(const Channel* channel);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<Channel>> channels_;  // shared: a channel outlives a send in flight
  std::chrono::milliseconds interval_;
  std::thread thread_;
};

/// A connection to another agent, with the time anything last arrived on it.
struct Link {
  explicit Link(std::shared_ptr<Channel> c) : channel(std::move(c)), heard(std::chrono::steady_clock::now()) {}
  std::shared_ptr<Channel> channel;
  std::chrono::steady_clock::time_point heard;

  int fd() const { return channel->fd(); }
  /// Reads what arrived and appends the messages except heartbeats (which only refresh `heard`).
  /// False once the peer closed the connection.
  bool receive(std::vector<nlohmann::json>& out);
  /// Nothing arrived for `seconds`.
  bool silent_for(double seconds) const;
};

}  // namespace cohort::launcher
