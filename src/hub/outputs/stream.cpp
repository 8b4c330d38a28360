// Subscriber queues of the hub. See hub/outputs/stream.h. Nothing here reads or builds the messages.
#include "hub/outputs/stream.h"

namespace cohort::hub::detail {

void Queue::push(const StreamMessage& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (messages_.size() >= kQueueLimit) {
      // Fallen behind: what it has is stale anyway. It reloads the snapshot on "resync".
      messages_.clear();
      messages_.push_back({"resync", "{}"});
    }
    messages_.push_back(m);
  }
  cv_.notify_one();
}

void Queue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool Queue::next(StreamMessage& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || !messages_.empty(); });
  // What was queued before close() is still delivered (the job's final state), then false.
  if (messages_.empty()) return false;
  out = std::move(messages_.front());
  messages_.pop_front();
  return true;
}

std::shared_ptr<Queue> Subscribers::add() {
  auto q = std::make_shared<Queue>();
  queues_.push_back(q);
  return q;
}

void Subscribers::publish(const char* event, const std::string& data) {
  if (queues_.empty()) return;
  StreamMessage m{event, data};
  for (size_t i = 0; i < queues_.size();) {
    if (auto q = queues_[i].lock()) {
      q->push(m);
      ++i;
    } else {
      queues_.erase(queues_.begin() + static_cast<long>(i));
    }
  }
}

void Subscribers::close_all() {
  for (auto& w : queues_) {
    if (auto q = w.lock()) q->close();
  }
  queues_.clear();
}

}  // namespace cohort::hub::detail
