// What the agents accept from a socket (issue 22): every message of the protocol passes the kind
// check; a wrong type, an unknown "type" or an out-of-range number is named and dropped, and the
// channel that carried it stops instead of throwing into the agent.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "launcher/io/channel.h"
#include "launcher/io/message_check.h"
#include "launcher/protocol.h"

using namespace cohort::launcher;
using json = nlohmann::json;

TEST(LauncherMessages, TheProtocolsOwnMessagesPass) {
  RoundFailure f;
  f.who.restart_count = 2;
  f.who.rank = 3;
  f.who.pid = 123456;
  f.how = "exited with 1";
  f.time_ms = 1700000000000;
  f.summary = "rank 3 failed";
  const std::vector<json> messages{
      {{"type", "join"}, {"node_rank", 1}, {"nnodes", 2}, {"nproc", 4}},
      {{"type", "join"}, {"rdzv_id", "job"}, {"min", 1}, {"max", 3}, {"nproc", 2}, {"pid", 99}},
      {{"type", "reject"}, {"reason", "no"}, {"timeout", false}},
      {{"type", "wait"}, {"note", "n"}},
      {{"type", "start"}, {"round", 1}, {"restarts", 1}, {"world_size", 4}, {"rank_base", 2}, {"node_rank", 1},
       {"nnodes", 2}, {"master_addr", "127.0.0.1"}, {"master_port", 29500}, {"notice", ""},
       {"failure", failure_to_json(f)}},
      {{"type", "done"}, {"round", 0}},
      {{"type", "fail"}, {"round", 0}, {"summary", "s"}, {"failure", failure_to_json(f)}},
      {{"type", "abort"}, {"round", 0}, {"summary", "s"}},
      {{"type", "stop"}, {"round", 0}, {"restart", true}, {"summary", "s"}},
      {{"type", "end"}, {"round", 0}, {"summary", "s"}},
      {{"type", "finish"}, {"round", 0}},
      {{"type", "stopped"}, {"round", 0}},
      {{"type", "beat"}},
      {{"type", "monitor"}, {"node", 1}, {"m", {{"type", "metrics"}, {"step", "anything: the hub checks"}}}},
  };
  for (const auto& m : messages) EXPECT_EQ(agent_message_problem(m), "") << m.dump();
  EXPECT_EQ(failure_from(messages[6])->who.pid, 123456);
}

TEST(LauncherMessages, WrongKindsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"type":1})", "no \"type\" string"},
      {R"({"type":7})", "no \"type\" string"},
      {R"({"round":1})", "no \"type\" string"},
      {R"([1,2])", "not a JSON object"},
      {R"({"type":"gimme"})", "unknown type \"gimme\""},
      {R"({"type":"join","nnodes":"2"})", "\"join\": \"nnodes\" is \"2\", not an integer"},
      {R"({"type":"join","nproc":1e300})", "\"nproc\" is 1e+300, not an integer"},
      {R"({"type":"join","nproc":4294967296})", "\"nproc\" is 4294967296, not an integer"},
      {R"({"type":"join","min":-2147483649})", "\"min\""},
      {R"({"type":"start","master_port":1.5})", "\"master_port\""},
      {R"({"type":"reject","timeout":"yes"})", "\"timeout\" is \"yes\", not true or false"},
      {R"({"type":"stop","failure":[]})", "\"failure\" is [], not an object"},
      {R"({"type":"fail","failure":{"pid":"x"}})", "failure \"pid\" is \"x\""},
      {R"({"type":"fail","failure":{"time_ms":18446744073709551615}})", "failure \"time_ms\""},
      {R"({"type":"monitor","m":"x"})", "\"m\" is \"x\", not an object"},
      // A field of another type's message is checked too (found by fuzz/fuzz_agent_message).
      {R"({"type":"fail","round":0,"timeout":"rank 1d"})", "\"fail\": \"timeout\" is \"rank 1d\", not true or false"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string problem = agent_message_problem(json::parse(text));
    EXPECT_NE(problem.find(needle), std::string::npos) << text << " gave: " << problem;
  }
}

TEST(LauncherMessages, ChannelStopsAtTheFirstMessageThatIsNotOne) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string token(64, 'k');
  Channel reader(sv[0], token), writer(sv[1], token);  // authentic, but the second message is mistyped
  ASSERT_TRUE(writer.send({{"type", "beat"}}));
  ASSERT_TRUE(writer.send({{"type", "done"}, {"round", "x"}}));
  ASSERT_TRUE(writer.send({{"type", "beat"}}));
  std::vector<json> got;
  EXPECT_FALSE(reader.receive(got));  // the sender is not an agent of this protocol: the channel is done
  ASSERT_EQ(got.size(), 1u);          // what came before still counts, nothing after
  EXPECT_EQ(got[0]["type"], "beat");
  std::vector<json> none;
  EXPECT_FALSE(writer.receive(none));  // and the sender was told why
  EXPECT_NE(writer.refusal().find("\"round\" is \"x\""), std::string::npos) << writer.refusal();
}

// A failure's summary quotes the worker's last lines of output, which may hold any bytes: the
// channel sends them with U+FFFD (issue 50); dump() threw type_error.316 into the agent.
TEST(LauncherMessages, ASummaryQuotingOutputThatIsNotUtf8IsSentReplaced) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string token(64, 'k');
  Channel reader(sv[0], token), writer(sv[1], token);
  ASSERT_TRUE(writer.send({{"type", "fail"}, {"round", 0}, {"summary", "rank 0 exited with 1:\n    [0] caf\xe9\n"}}));
  ASSERT_TRUE(writer.send({{"type", "beat"}}));
  std::vector<json> got;
  EXPECT_TRUE(reader.receive(got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["summary"], "rank 0 exited with 1:\n    [0] caf\xEF\xBF\xBD\n");
}
