// `cohort trace RUN_DIR -o trace.json` on logs written here (issue 49, item 3; no torch): a
// synthetic two-rank log becomes a Chrome trace that Python's JSON reader accepts (trace_check.py:
// fields, nesting per thread — overlapping buckets on a second comm lane —, flow pairs, every
// step's phases); a missing, unreadable, foreign, truncated or hostile log gives one clear line
// (or, for lines it can skip, a trace and a count of what was left out). Real runs:
// timeline_process_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/launcher/launcher_test_util.h"

using namespace launcher_test;
using nlohmann::json;

namespace {

// A metrics record of `rank` at `step` whose timeline begins at `t0`: the five phases over 10 ms,
// two buckets that overlap each other and backward, and what `extra` adds.
json trace_test_record(int rank, int step, double t0, const json& extra = json::array()) {
  json spans = json::parse(R"([
    ["data","compute",0,0.001,null], ["forward","compute",0.001,0.002,null],
    ["backward","compute",0.003,0.004,null], ["comm_wait","compute",0.007,0.002,null],
    ["optimizer","compute",0.009,0.001,null],
    ["bucket","comm",0.004,0.003,{"index":0,"bytes":4096,"algorithm":"ring","what":"ddp bucket"}],
    ["bucket","comm",0.006,0.0025,{"index":1,"bytes":2048,"algorithm":"ring","what":"ddp bucket"}]])");
  for (const auto& e : extra) spans.push_back(e);
  return {{"type", "metrics"}, {"rank", rank}, {"step", step}, {"world_size", 2}, {"step_s", 0.01},
          {"timeline", {{"t0", t0}, {"clock_offset_s", rank ? 1e-5 : 0.0}, {"clock_error_s", rank ? 2e-5 : 0.0},
                        {"spans", spans}}}};
}

std::string trace_test_log() {
  std::string log = R"({"type":"event","kind":"round_started","t":1})" "\n";
  for (int step = 1; step <= 3; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      json extra = json::array();
      if (step == 2 && rank == 0) extra.push_back(json::parse(R"(["ckpt_write","io",-0.005,0.008,null])"));
      if (step == 2) extra.push_back(json::parse(R"(["ckpt_capture","io",0.0095,0.0004,{"bytes":100}])"));
      log += trace_test_record(rank, step, 100.0 + 0.01 * (step - 1) + rank * 1e-4, extra).dump() + "\n";
    }
  }
  return log;
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

Result trace_cmd(const std::vector<std::string>& args) {
  std::vector<std::string> cmd{COHORT_BIN, "trace"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return run(cmd, 30);
}

// The command failed with exactly one line, naming `what`.
void expect_one_line_error(const Result& r, const std::string& what) {
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(contains(r.err, "cohort trace: error: ")) << r.err;
  EXPECT_TRUE(contains(r.err, what)) << r.err;
}

Result trace_check(const std::string& trace, const std::vector<std::string>& extra) {
  std::vector<std::string> cmd{"/usr/bin/python3", TRACE_CHECK_PY, trace};
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  return run(cmd, 60);
}

}  // namespace

TEST(TraceCommand, ALogBecomesAChromeTraceThatPythonReads) {
  TempDir tmp;
  write_file(tmp.path() + "/events.jsonl", trace_test_log());
  const std::string out = tmp.path() + "/trace.json";
  Result r = trace_cmd({tmp.path(), "-o", out});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(contains(r.err, "2 ranks, 45 spans of 6 steps")) << r.err;
  Result check = trace_check(out, {"--ranks", "2", "--steps", "1", "3"});
  EXPECT_EQ(check.exit_code(), 0) << check.out << check.err;
  const json doc = json::parse(slurp(out));
  std::set<std::string> threads;
  int flows = 0, io = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0) threads.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "s") ++flows;
    if (e["ph"] == "X" && e["cat"] == "io") ++io;
    if (e["ph"] == "X" && e["name"] == "forward" && e["pid"] == 0 && e["args"]["step"] == 1) {
      EXPECT_NEAR(e["ts"].get<double>(), 1000.0, 1e-3);  // µs after the earliest span (step 1's data)
      EXPECT_NEAR(e["dur"].get<double>(), 2000.0, 1e-3);
    }
    if (e["ph"] == "X" && e["name"] == "bucket" && e["pid"] == 1 && e["args"]["step"] == 3 && e["args"]["index"] == 1) {
      EXPECT_EQ(e["args"]["bytes"], 2048);
      EXPECT_EQ(e["args"]["algorithm"], "ring");
    }
  }
  // The second bucket begins while the first runs and ends after it: a lane of its own.
  EXPECT_EQ(threads, (std::set<std::string>{"compute", "comm", "comm 2", "io"}));
  EXPECT_EQ(flows, 12);  // one per bucket
  EXPECT_EQ(io, 3);
  // Standard output, and a range of steps.
  Result part = trace_cmd({tmp.path(), "-o", "-", "--first-step", "2", "--last-step", "2"});
  ASSERT_EQ(part.exit_code(), 0) << part.err;
  int complete = 0;
  const json part_doc = json::parse(part.out);
  for (const auto& e : part_doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_EQ(e["args"]["step"], 2) << e.dump();
  }
  EXPECT_EQ(complete, 2 * 7 + 3);  // both ranks' phases and buckets, a write and two captures
}

TEST(TraceCommand, MissingOrUnreadableLogsAreOneLine) {
  TempDir tmp;
  expect_one_line_error(trace_cmd({tmp.path() + "/nowhere"}), tmp.path() + "/nowhere: No such file or directory");
  write_file(tmp.path() + "/file", "x");
  expect_one_line_error(trace_cmd({tmp.path() + "/file"}), "is not a directory");
  expect_one_line_error(trace_cmd({tmp.path()}), "no event log " + tmp.path() + "/events.jsonl");
  ASSERT_EQ(mkfifo((tmp.path() + "/events.jsonl").c_str(), 0600), 0);  // would block a plain open
  expect_one_line_error(trace_cmd({tmp.path()}), "is not a regular file");
}

TEST(TraceCommand, ForeignLogsAreOneLine) {
  TempDir tmp;
  const std::string log = tmp.path() + "/events.jsonl";
  write_file(log, "GIF89a\x01\x02\nnot json at all\n");
  expect_one_line_error(trace_cmd({tmp.path()}), "is not a cohort event log (2 lines, none of them a JSON object)");
  write_file(log, R"({"type":"event","kind":"round_started"})" "\n");
  expect_one_line_error(trace_cmd({tmp.path()}), "has no metrics records");
  write_file(log, R"({"type":"metrics","rank":0,"step":1,"step_s":0.1})" "\n");
  expect_one_line_error(trace_cmd({tmp.path()}), "has no step timelines (1 metrics records without \"timeline\"");
  write_file(log, trace_test_log());
  expect_one_line_error(trace_cmd({tmp.path(), "--first-step", "7"}), "has no spans in the steps asked for");
  expect_one_line_error(trace_cmd({tmp.path(), "-o", tmp.path() + "/no/such/dir/trace.json"}), "cannot write");
}

TEST(TraceCommand, TruncatedAndHostileLinesAreLeftOutAndCounted) {
  TempDir tmp;
  std::string log = trace_test_log();
  log += std::string(2 << 20, '[') + "\n";                        // a 2 MiB line: skipped, never parsed
  log += std::string(100000, '[') + std::string(100000, ']') + "\n";  // nested past the depth cap
  json bad = trace_test_record(1, 4, 100.03, json::parse(R"([
    [7,"compute",0,0.001,null], ["x","gpu",0,0.001,null], ["y","io",0,-1,null], ["z","io","0",0.1,null],
    ["w","io",1e300,0.1,null], ["v\u0001","io",0,0.1,null], "not an array", ["u","io"],
    ["t","comm",0,0.001,{"index":-5,"bytes":"many","algorithm":["ring"],"what":"ok"}]])"));
  bad["rank"] = 1;
  log += bad.dump() + "\n";
  log += R"({"type":"metrics","rank":99999999999,"step":5,"timeline":{"t0":1,"spans":[]}})" "\n";
  log += trace_test_record(0, 4, 100.03).dump().substr(0, 120);  // the last line torn by a killed agent
  write_file(tmp.path() + "/events.jsonl", log);
  const std::string out = tmp.path() + "/trace.json";
  Result r = trace_cmd({tmp.path(), "-o", out});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(contains(r.err, "left out: 3 unreadable lines, 8 malformed spans")) << r.err;
  Result check = trace_check(out, {"--ranks", "2", "--steps", "1", "3"});
  EXPECT_EQ(check.exit_code(), 0) << check.out << check.err;
  const json doc = json::parse(slurp(out));
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X" || e["name"] != "t") continue;
    EXPECT_EQ(e["args"], json({{"what", "ok"}, {"step", 4}})) << "unchecked args passed through";
  }
}
