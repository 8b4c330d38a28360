// Gloo's headers and the libtorch's Gloo agree where cohort depends on them.
//
// A libtorch 2.x from a Python wheel carries Gloo compiled in but no Gloo headers, so that build
// compiles ProcessGroupGloo.hpp against Debian's libgloo-dev (a 2022 snapshot; the wheel's Gloo is
// newer). That is sound only if no Gloo code from those headers ends up in cohort — Gloo objects
// may then only travel by pointer between c10d's own functions, whose Gloo is the wheel's — and if
// the collectives cohort uses give exact results. Both are checked here, on every build.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <array>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "support/thread_ranks.h"

namespace {

std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

// Every symbol libcohort.so defines whose name involves Gloo: what its code took from Gloo's
// headers. Allowed: std containers and smart pointers of Gloo pointers (layout-independent of the
// pointee) and c10d's intrusive_ptr of ProcessGroupGloo's Options (c10d's own header).
TEST(GlooAbi, NoGlooCodeFromTheHeadersIsCompiledIntoCohort) {
  const std::string symbols = command_output("nm -C --defined-only '" COHORT_LIBRARY "' 2>&1");
  ASSERT_NE(symbols.find(" T "), std::string::npos) << "nm could not read " COHORT_LIBRARY ":\n" << symbols.substr(0, 500);
  const std::regex allowed(R"re(^(void )?(std::(vector|shared_ptr|__shared_ptr|_Sp_counted_ptr)<|c10::intrusive_ptr<c10d::ProcessGroupGloo::Options))re");
  std::vector<std::string> gloo_code;
  size_t start = 0;
  while (start < symbols.size()) {
    size_t end = symbols.find('\n', start);
    if (end == std::string::npos) end = symbols.size();
    const std::string line = symbols.substr(start, end - start);
    start = end + 1;
    if (line.find("gloo::") == std::string::npos) continue;
    const size_t name_at = line.find(' ', line.find(' ') + 1);  // "ADDRESS TYPE NAME"
    const std::string name = name_at == std::string::npos ? line : line.substr(name_at + 1);
    if (!std::regex_search(name, allowed)) gloo_code.push_back(line);
  }
  std::string list;
  for (const auto& s : gloo_code) list += "  " + s + "\n";
  EXPECT_TRUE(gloo_code.empty()) << "libcohort.so defines Gloo code from the headers it was compiled with; "
                                    "with a libtorch whose Gloo differs this may not match:\n" << list;
}

#ifdef COHORT_WITH_GLOO
// The collectives cohort calls on the Gloo group, each with an exact expected result.
TEST(GlooAbi, EveryCollectiveCohortUsesGivesExactResults) {
  constexpr int world = 3;
  cohort::testing::run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    auto& g = *ctx->group();
    const int r = ctx->rank();
    for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kLong}) {
      // Sums stay below 2048, so that every partial sum is exact in half precision too.
      auto t = at::arange(600, at::TensorOptions().dtype(at::kLong)).add(r).to(dtype);
      std::vector<at::Tensor> v{t};
      g.allreduce(v)->wait();
      auto expected = at::arange(600, at::TensorOptions().dtype(at::kLong)).mul(world).add(0 + 1 + 2);
      EXPECT_TRUE(at::equal(t.to(at::kLong), expected)) << "allreduce of " << dtype << " on rank " << r;
    }
    auto b = at::full({257}, static_cast<double>(r + 7), at::kDouble);
    std::vector<at::Tensor> bv{b};
    c10d::BroadcastOptions bo;
    bo.rootRank = 1;
    g.broadcast(bv, bo)->wait();
    EXPECT_TRUE(at::equal(b, at::full({257}, 8.0, at::kDouble)));

    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < world; ++i) out[0].push_back(at::empty({5}, at::kFloat));
    std::vector<at::Tensor> in{at::full({5}, static_cast<float>(r * 10))};
    g.allgather(out, in)->wait();
    for (int i = 0; i < world; ++i) EXPECT_TRUE(at::equal(out[0][i], at::full({5}, static_cast<float>(i * 10))));

    // A ring of send/recv (ring reduce-scatter on 1.13's Gloo is built from these).
    std::vector<at::Tensor> send{at::full({64}, static_cast<float>(r))};
    std::vector<at::Tensor> recv{at::empty({64}, at::kFloat)};
    auto s = g.send(send, (r + 1) % world, 5);
    g.recv(recv, (r + world - 1) % world, 5)->wait();
    s->wait();
    EXPECT_TRUE(at::equal(recv[0], at::full({64}, static_cast<float>((r + world - 1) % world))));

    g.barrier()->wait();
  });
}
#endif

}  // namespace
