// The Fashion-MNIST example as a user runs it: two processes agree on their parameters, and a
// missing or unusable data set is a one-line error.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <regex>

#include "support/subprocess.h"

namespace {

using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)

const std::string kExample = COHORT_FASHION_MNIST;

bool have_dataset() { return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good(); }

std::vector<std::string> checksums(const std::string& output) {
  std::vector<std::string> out;
  std::regex re("\"param_checksum\":\"([0-9a-f]{16})\"");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

TEST(Example, MissingDataDirectoryIsAOneLineError) {
  auto r = run_shell("env -i " + kExample + " --data /nonexistent/fashion --max-steps 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "fashion_mnist: rank 0: Fashion-MNIST directory not found: /nonexistent/fashion (install Debian's "
            "dataset-fashion-mnist, or pass --data DIR)\n");
}

TEST(Example, BadFlagIsRejected) {
  auto r = run_shell("env -i " + kExample + " --model transformer");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--model")) << r.output;
}

// Numbers that CLI11's own checks let through (NaN passes every comparison; inf is "positive"):
// one line naming the flag and exit 2, before any training (issue 22; --lr nan was an 11-line
// libtorch backtrace).
TEST(Example, NonFiniteAndOutOfRangeNumbersAreOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--lr nan", "--lr"},          {"--lr inf", "--lr"},           {"--lr -0.1", "--lr"},
      {"--momentum nan", "--momentum"}, {"--momentum 2", "--momentum"}, {"--bucket-cap-mb nan", "--bucket-cap-mb"},
      {"--bucket-cap-mb inf", "--bucket-cap-mb"}, {"--threads -3", "--threads"}, {"--outer-lr nan", "--outer-lr"},
  };
  for (const auto& [flags, name] : cases) {
    const auto r = run_shell("env -i " + kExample + " --max-steps 1 " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << flags << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "fashion_mnist: error: " + name)) << flags << "\n" << r.output;
  }
}

// An IDX file (the format the example reads): magic, big-endian sizes, then `data`.
void write_idx(const std::string& path, const std::vector<uint32_t>& shape, const std::string& data) {
  std::string bytes{'\0', '\0', '\x08', static_cast<char>(shape.size())};
  for (uint32_t d : shape)
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((d >> shift) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes << data;
}

// Data the example cannot train on, each with the one line that names it and exit status 2, before
// init(): a FIFO (it hung in open(), where no hang detector looks), a header claiming 2^31 images,
// no images at all (it exited 0 after 0 steps), 2 x 2 images and a label of 12 (both libtorch
// backtraces from inside the first step). The process must end by itself: `timeout` kills a hung
// one, and the test then fails on its status.
TEST(Example, DataItCannotTrainOnIsAOneLineErrorBeforeTraining) {
  const std::string dir = ::testing::TempDir() + "/cohort_bad_data_" + std::to_string(::getpid());
  const std::string images = dir + "/train-images-idx3-ubyte", labels = dir + "/train-labels-idx1-ubyte";
  struct Case {
    std::string name;
    std::function<void()> make;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"a FIFO", [&] { ASSERT_EQ(::mkfifo(images.c_str(), 0600), 0); },
       "IDX file " + images + ": not a regular file (a FIFO)"},
      {"2^31 images", [&] { write_idx(images, {1u << 31, 28, 28}, ""); },
       "IDX file " + images + " declares a 2147483648 x 28 x 28 array (1.5 TiB), more than the 1 GiB the example reads into memory"},
      {"no images", [&] { write_idx(images, {0, 28, 28}, ""), write_idx(labels, {0}, ""); },
       images + " holds no images (a data set to train on needs some)"},
      {"2 x 2 images", [&] { write_idx(images, {4, 2, 2}, std::string(16, '\x40')); },
       images + " holds 2 x 2 images; the models take 28 x 28"},
      {"label 12", [&] { write_idx(labels, {4}, std::string("\x01\x0c\x02\x03", 4)); },
       labels + " holds label 12; Fashion-MNIST's classes are 0 to 9"},
  };
  for (const auto& c : cases) {
    run_shell("rm -rf " + dir + " && mkdir -p " + dir);
    write_idx(images, {4, 28, 28}, std::string(4 * 28 * 28, '\x40'));
    write_idx(labels, {4}, std::string("\x01\x02\x03\x04", 4));
    run_shell("rm -f " + (c.name == "label 12" ? labels : images));
    c.make();
    const auto r = run_shell("timeout -s KILL 20 env -i " + kExample + " --data " + dir + " --max-steps 2 --batch-size 2 --no-eval");
    EXPECT_EQ(r.exit_code, 2) << c.name << "\n" << r.output;
    EXPECT_EQ(r.output, "fashion_mnist: rank 0: " + c.expected + "\n") << c.name;
  }
  run_shell("rm -rf " + dir);
}

TEST(Example, TwoRanksTrainAndAgreeOnParametersAndAreReproducible) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto job = [&](const std::string& more = "") {
    const std::string port = std::to_string(free_port());
    std::string cmd;
    for (int r = 0; r < 2; ++r) {
      cmd += "env -i RANK=" + std::to_string(r) + " WORLD_SIZE=2 MASTER_PORT=" + port + " timeout 120 " + kExample +
             " --max-steps 30 --no-eval --threads 1 --log-every 0" + more + " & ";
    }
    return run_shell(cmd + "wait");
  };
  auto first = job();
  auto sums = checksums(first.output);
  ASSERT_EQ(sums.size(), 2u) << first.output;
  EXPECT_EQ(sums[0], sums[1]) << "ranks disagree";
  EXPECT_TRUE(contains(first.output, "\"steps\":30")) << first.output;
  EXPECT_TRUE(contains(first.output, "\"world_size\":2")) << first.output;
  // Fixed seed, one thread, same world size: bitwise the same parameters again (the warm-up only
  // says when the timer starts; with none, every step is timed and the throughput is still one).
  const auto second = job(" --warmup-steps 0");
  auto again = checksums(second.output);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0], sums[0]);
  std::smatch rate;
  ASSERT_TRUE(std::regex_search(second.output, rate, std::regex("\"samples_per_s\":([0-9.e+-]+)"))) << second.output;
  EXPECT_GT(std::stod(rate[1]), 100) << second.output;  // not the samples over the clock's whole epoch

  // Each rank says where its timed steps went ("phase_ms", the monitor's phases): together they
  // make up the step that samples_per_s measures, over the same steps; the median step
  // ("step_ms_median") is one of those steps, about as long as their mean.
  const std::regex line_re(
      "\\{.*\"phase_ms\":\\{([^}]*)\\}.*\"samples_per_s\":([0-9.e+-]+).*\"step_ms_median\":([0-9.e+-]+).*\\}");
  const std::regex phase_re("\"(data|forward|backward|comm_wait|optimizer)\":([0-9.e+-]+)");
  int lines = 0;
  for (std::sregex_iterator it(first.output.begin(), first.output.end(), line_re), end; it != end; ++it, ++lines) {
    const std::string phases = (*it)[1];
    const double step_ms = 1000.0 * 2 * 64 / std::stod((*it)[2]);
    double sum = 0;
    int count = 0;
    for (std::sregex_iterator p(phases.begin(), phases.end(), phase_re); p != end; ++p, ++count) {
      EXPECT_GE(std::stod((*p)[2]), 0) << phases;
      sum += std::stod((*p)[2]);
    }
    EXPECT_EQ(count, 5) << phases;
    EXPECT_NEAR(sum, step_ms, 0.2 * step_ms) << phases;
    EXPECT_NEAR(std::stod((*it)[3]), step_ms, 0.5 * step_ms) << (*it)[0];
  }
  EXPECT_EQ(lines, 2) << first.output;
}

// A peer that dies mid-training (SIGKILL, ranks started by hand, no launcher to stop the rest):
// the survivor names the dead rank within seconds instead of waiting out the 300 s collective
// timeout in the shared-memory allreduce.
TEST(Example, ASurvivorNamesTheDeadPeerInsteadOfHanging) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string dir = ::testing::TempDir() + "/cohort_dead_peer_" + std::to_string(::getpid());
  const std::string port = std::to_string(free_port());
  const std::string common = " WORLD_SIZE=2 MASTER_PORT=" + port + " " + kExample +
                             " --epochs 1000 --no-eval --threads 1 --log-every 20 ";
  auto r = run_shell("mkdir -p " + dir + "; cd " + dir + " || exit 1; " +
                     "(env -i RANK=0" + common + "> out0 2>&1 & echo $! > pid0; wait) & " +
                     "env -i RANK=1" + common + "> out1 2>&1 & p1=$!; "
                     "for i in $(seq 600); do grep -q 'step 20' out0 2>/dev/null && break; sleep 0.1; done; "
                     "kill -9 $p1; start=$(date +%s%N); p0=$(cat pid0); "
                     "while kill -0 $p0 2>/dev/null; do sleep 0.05; [ $(( ($(date +%s%N) - start) / 1000000 )) -gt 60000 ] && kill -9 $p0; done; "
                     "echo after_ms=$(( ($(date +%s%N) - start) / 1000000 )); cat out0; wait");
  EXPECT_TRUE(contains(r.output, "step 20")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: shared-memory allreduce: rank 1 (pid ")) << r.output;
  EXPECT_TRUE(contains(r.output, ") died; stopping instead of waiting for it")) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("after_ms=([0-9]+)"))) << r.output;
  EXPECT_LT(std::stol(m[1]), 30000) << "the survivor did not notice the death well before the collective timeout";
}

// The goal, as a user gets it: `cohort run` with 2 local ranks, 5 epochs of the CNN.
TEST(Example, ReachesTheAccuracyGoalInFiveEpochsOnTwoRanks) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto r = run_shell("timeout 900 " + kCohort + " run --nproc-per-node 2 --threads-per-proc 1 -- " + kExample +
                     " --epochs 5 --log-every 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex re("\\[0\\] \\{.*\"test_accuracy\":([0-9.]+)");
  ASSERT_TRUE(std::regex_search(r.output, m, re)) << r.output;
  const double accuracy = std::stod(m[1]);
  std::cout << "test accuracy after 5 epochs on 2 ranks: " << accuracy << std::endl;
  EXPECT_GE(accuracy, 0.91);
  EXPECT_EQ(checksums(r.output).size(), 2u);
}

}  // namespace
