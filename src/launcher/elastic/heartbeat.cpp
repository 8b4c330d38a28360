// Heartbeats between the agents of an elastic job. See heartbeat.h.
#include "launcher/elastic/heartbeat.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>

namespace cohort::launcher {

HeartbeatSender::HeartbeatSender(double interval_s)
    : interval_(std::max<int64_t>(20, static_cast<int64_t>(interval_s * 1000))) {
  // The thread takes no signals: SIGINT, SIGTERM and SIGCHLD stay the main loop's (signal_pipe.h).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  thread_ = std::thread([this] { loop(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatSender::add(const std::shared_ptr<Channel>& channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.push_back(channel);
}

void HeartbeatSender::remove(const Channel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.erase(std::remove_if(channels_.begin(), channels_.end(),
                                 [&](const std::shared_ptr<Channel>& c) { return c.get() == channel; }),
                  channels_.end());
}

void HeartbeatSender::loop() {
  const nlohmann::json beat{{"type", "beat"}};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    std::vector<std::shared_ptr<Channel>> targets = channels_;
    lock.unlock();  // sending may wait for a full socket; add() and remove() must not
    for (const auto& c : targets) c->send(beat);
    targets.clear();
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

bool Link::receive(std::vector<nlohmann::json>& out) {
  std::vector<nlohmann::json> messages;
  const bool open = channel->receive(messages);
  if (!messages.empty()) heard = std::chrono::steady_clock::now();
  for (auto& m : messages) {
    if (m.value("type", "") != "beat") out.push_back(std::move(m));
  }
  return open;
}

bool Link::silent_for(double seconds) const {
  return std::chrono::steady_clock::now() - heard > std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace cohort::launcher
