// hub/outputs/stream.h — private to the hub: one dashboard connection's queue of live messages
// (the Subscription that Hub::subscribe hands out), and the list of them the hub publishes to.
// A queue that falls kQueueLimit messages behind is emptied and told to "resync", so a slow
// reader never makes the hub (and the agent feeding it) wait. Not here: what the messages say
// (hub.cpp), and serving them over HTTP (dashboard/server.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "hub/hub.h"

namespace cohort::hub::detail {

constexpr size_t kQueueLimit = 4096;  // messages a subscriber may fall behind before a resync

class Queue : public Subscription {
 public:
  /// Appends a message (dropped once closed); never blocks on the reader.
  void push(const StreamMessage& m);
  /// What was queued is still delivered, then next() returns false.
  void close();
  bool next(StreamMessage& out, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamMessage> messages_;
  bool closed_ = false;
};

/// The hub's subscribers. Not thread-safe: the hub calls it under its own mutex.
class Subscribers {
 public:
  bool empty() const { return queues_.empty(); }
  /// A new queue (already closed when the hub is).
  std::shared_ptr<Queue> add();
  /// The message to every live queue; queues nobody holds any more are forgotten.
  void publish(const char* event, const std::string& data);
  /// Closes every queue and forgets them.
  void close_all();

 private:
  std::vector<std::weak_ptr<Queue>> queues_;
};

}  // namespace cohort::hub::detail
