// The agents' channel's droppable sends (launcher/io/channel.h), which carry forwarded metrics to the
// leading agent: they never wait, drop when the queue is full, and never tear a message — also
// when a message that must arrive (send()) follows them.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "launcher/io/channel.h"

using cohort::launcher::Channel;
using nlohmann::json;

TEST(ChannelDroppable, NeverWaitsDropsWhenFullAndKeepsMessagesWhole) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int small = 4096;
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  const std::string token(64, 't');
  Channel sender(fds[0], token), receiver(fds[1], token);
  // Droppable sends never wait, so not for the receiver's hello either: let it arrive first.
  ASSERT_TRUE(sender.send({{"type", "beat"}}));
  const std::string pad(200, 'x');
  size_t sent = 0, dropped = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5000; ++i) {  // nobody reads: the socket fills, then the queue (64 KiB here)
    if (sender.send_droppable({{"type", "monitor"}, {"i", i}, {"pad", pad}}, 64 << 10)) ++sent;
    else ++dropped;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "a droppable send waited";
  EXPECT_GT(sent, 100u);
  EXPECT_GT(dropped, 1000u);
  EXPECT_EQ(sender.dropped(), dropped);
  // A message that must arrive comes after what was queued, whole: read while it is being sent.
  std::vector<json> got;
  std::thread reader([&] {
    while (got.empty() || got.back().value("type", "") != "stop") {
      receiver.receive(got);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  ASSERT_TRUE(sender.send({{"type", "stop"}, {"round", 3}}));
  reader.join();
  ASSERT_EQ(got.size(), sent + 2);  // the first beat, the monitor messages kept, the stop
  for (size_t k = 2; k + 1 < got.size(); ++k) EXPECT_LT(got[k - 1]["i"], got[k]["i"]);
  EXPECT_EQ(got.back()["round"], 3);
}
