// Fuzzes what an agent's channel (launcher/io/channel.h) makes of the bytes a peer sends. The first
// byte picks who the peer is:
//   even — a stranger: the rest goes onto the socket as it is (hello, MAC framing, refusal lines).
//          Without the job token nothing may come out as a message: one would be a forgery.
//   odd  — an agent of the job: each line of the rest that is JSON is sent by a real Channel with
//          the token. What comes out must be exactly those that are agent messages, in order, up
//          to the first that is not (where the receiver stops).
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/io/channel.h"
#include "launcher/io/message_check.h"
#include "runtime/json_fields.h"

using cohort::launcher::Channel;
using nlohmann::json;

namespace {
const std::string kToken(64, 't');
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 32768) return 0;  // stays within the socket's buffer: no reader thread needed
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<json> expected;
  Channel receiver(sv[0], kToken);
  if (data[0] % 2 == 0) {
    if (write(sv[1], rest.data(), rest.size()) != static_cast<ssize_t>(rest.size())) __builtin_trap();
    close(sv[1]);
  } else {
    Channel sender(sv[1], kToken);
    bool stopped = false;
    for (size_t start = 0; start < rest.size();) {
      size_t nl = rest.find('\n', start);
      if (nl == std::string::npos) nl = rest.size();
      auto m = cohort::detail::parse_capped_or_discarded(rest.begin() + static_cast<long>(start), rest.begin() + static_cast<long>(nl));
      start = nl + 1;
      if (m.is_discarded()) continue;
      if (!sender.send(m)) __builtin_trap();
      if (!stopped && m.is_object() && cohort::launcher::agent_message_problem(m).empty()) {
        expected.push_back(m);
      } else {
        stopped = true;
      }
    }
  }  // the sender closes its end
  std::vector<json> got;
  receiver.receive(got);
  if (data[0] % 2 == 0 && !got.empty()) __builtin_trap();  // a message without the token
  if (data[0] % 2 == 1 && got != expected) __builtin_trap();
  return 0;
}
