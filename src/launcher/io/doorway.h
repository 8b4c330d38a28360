// launcher/io/doorway.h — the connections a rendezvous host accepted that have not joined yet.
//
// Anyone who can reach the host's port can connect, and until a connection's first authentic
// message ("join", channel.h) it may be anyone's. So what it may cost the host is bounded:
//  * memory: 4 KiB before its hello (channel.cpp), 64 KiB in all until it joins;
//  * time: 5 s from accept to join (an agent sends its join at once), then it is dropped;
//  * number: 64 waiting at once; one more pushes the oldest out, so that a flood of strangers
//    cannot keep a real node out for long (its join comes within milliseconds of its connect);
//  * descriptors: when accept() finds none left (EMFILE), the oldest waiting connection is dropped
//    to make room; with none waiting, the listener is left alone for 100 ms rather than polled in
//    a busy loop (a readable listener that accept() cannot empty made the host spin).
// A dropped connection is told why in one line (Channel::refuse); stderr names the first of them.
// Used by the static host (static/rendezvous.cpp) and the elastic host (elastic/roster.cpp).
#pragma once

#include <poll.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/io/channel.h"

namespace cohort::launcher {

class Doorway {
 public:
  static constexpr size_t kMaxWaiting = 64;
  static constexpr size_t kJoinBytes = 64 * 1024;
  static constexpr std::chrono::milliseconds kJoinWindow{5000};
  static constexpr std::chrono::milliseconds kBackOff{100};

  /// `listener`: a listening socket, not owned (made non-blocking here). `token`: the job's.
  Doorway(int listener, std::string token);

  /// The listener (unless backing off after running out of descriptors) and every waiting connection.
  void add_pollfds(std::vector<pollfd>& fds) const;

  struct Arrival {
    std::unique_ptr<Channel> channel;  // its buffer limit back to Channel's default
    nlohmann::json join;               // its first "join" (other messages before it are ignored)
  };
  /// Accepts what poll() marked, reads the waiting connections that it marked, drops those that
  /// overstayed, and returns the ones that joined.
  std::vector<Arrival> service(const std::vector<pollfd>& fds);

 private:
  struct Waiting {
    std::unique_ptr<Channel> channel;
    std::chrono::steady_clock::time_point since;  // accepted
  };
  void accept_some();
  void drop_oldest(const std::string& why);

  int listener_;
  std::string token_;
  std::vector<Waiting> waiting_;                      // oldest first
  std::chrono::steady_clock::time_point quiet_until_;  // the listener is not polled before
};

}  // namespace cohort::launcher
