#include "replica_sync.h"

#include <torch/csrc/utils/tensor_flatten.h>
#include <xxhash.h>

#include <map>
#include <sstream>

#include "cohort/checksum.h"
#include "cohort/error.h"
#include "runtime/agent_link/flight_op.h"
#include "runtime/context_internals.h"

namespace cohort::detail {
namespace {

// Every rank's value of one int64, gathered to every rank.
// `what` (a string literal) names it in the flight recorder.
std::vector<int64_t> allgather_int64(Backend& group, int world, int64_t value, const char* what) {
  std::vector<torch::Tensor> input{torch::tensor({value}, torch::kLong)};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int r = 0; r < world; ++r) output[0].push_back(torch::empty({1}, torch::kLong));
  FlightScope entry(flight_op("allgather", what, -1, input[0]));
  group.allgather(output, input)->wait();
  entry.done();
  std::vector<int64_t> out;
  for (auto& t : output[0]) out.push_back(t.item<int64_t>());
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// "rank 1 has parameter fc.weight [10, 30] Float where rank 0 has parameter fc.weight [10, 20] Float"
std::string first_difference(const std::string& mine, int my_rank, const std::string& theirs, int their_rank) {
  auto a = lines(mine), b = lines(theirs);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    std::string x = i < a.size() ? a[i] : "nothing", y = i < b.size() ? b[i] : "nothing";
    if (x != y) {
      return "rank " + std::to_string(my_rank) + " has " + x + " where rank " + std::to_string(their_rank) +
             " has " + y;
    }
  }
  return "the models differ";
}

}  // namespace

std::string model_signature(const std::vector<NamedTensor>& tensors) {
  std::ostringstream os;
  for (const auto& t : tensors) {
    os << t.kind << " '" << t.name << "' " << t.tensor.sizes() << " " << t.tensor.scalar_type() << "\n";
  }
  return os.str();
}

void check_same_model(Context& ctx, const std::vector<NamedTensor>& tensors, const std::string& settings,
                      const std::string& owner) {
  check_same_signature(ctx, model_signature(tensors), settings, owner);
}

void check_same_signature(Context& ctx, const std::string& model, const std::string& settings, const std::string& owner) {
  const std::string sig = model + settings;
  const auto hash = static_cast<int64_t>(XXH64(sig.data(), sig.size(), 0));
  auto hashes = allgather_int64(*ctx.group(), ctx.world_size(), hash, "model check");
  std::vector<int> differing;
  for (int r = 1; r < ctx.world_size(); ++r) {
    if (hashes[r] != hashes[0]) differing.push_back(r);
  }
  if (differing.empty()) return;

  // Slow path, only on a mismatch: exchange the signatures through the store to name the
  // difference. Every rank reaches this point, because every rank saw the same hashes.
  const std::string prefix = "cohort/ddp/" + std::to_string(detail::ContextInternals::next_sequence(ctx)) + "/signature/";
  ctx.store()->set(prefix + std::to_string(ctx.rank()), std::vector<uint8_t>(model.begin(), model.end()));
  ctx.store()->set(prefix + "settings/" + std::to_string(ctx.rank()),
                   std::vector<uint8_t>(settings.begin(), settings.end()));
  // Every rank names the same difference: the first differing rank against rank 0, the model first.
  const int first = differing.front();
  auto get = [&](const std::string& key, int r) {
    auto bytes = ctx.store()->get(prefix + key + std::to_string(r));
    return std::string(bytes.begin(), bytes.end());
  };
  const bool model_differs = get("", first) != get("", 0);
  const std::string what = model_differs ? "" : "settings/";
  const std::string detail = first_difference(get(what, first), first, get(what, 0), 0);
  std::string ranks;
  for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw ConfigError(ctx.rank(), owner + ": the " + (model_differs ? "model" : "settings") +
                                    " differ" + (model_differs ? "s" : "") + " across ranks (rank" +
                                    std::string(differing.size() > 1 ? "s " : " ") + ranks +
                                    " differ from rank 0): " + detail + ". Every rank must construct the same " +
                                    (model_differs ? "model." : owner + " options."));
}

void broadcast_from_rank0(Backend& group, const std::vector<torch::Tensor>& tensors, int64_t chunk_bytes,
                          bool write_back) {
  torch::NoGradGuard no_grad;
  // Group by dtype and device, then broadcast flattened chunks of about chunk_bytes.
  std::map<std::pair<int, std::string>, std::vector<torch::Tensor>> groups;
  for (const auto& t : tensors) {
    groups[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
  }
  int32_t chunk_index = 0;  // for the flight recorder
  for (auto& [key, list] : groups) {
    size_t begin = 0;
    while (begin < list.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < list.size() && (end == begin || bytes + list[end].nbytes() <= static_cast<size_t>(chunk_bytes))) {
        bytes += static_cast<int64_t>(list[end].nbytes());
        ++end;
      }
      std::vector<torch::Tensor> chunk(list.begin() + begin, list.begin() + end);
      std::vector<torch::Tensor> flat{torch::utils::flatten_dense_tensors(chunk)};
      FlightScope entry(flight_op("broadcast", "rank 0's values, chunk", chunk_index++, flat[0]));
      group.broadcast(flat)->wait();
      entry.done();
      if (write_back) {
        auto parts = torch::utils::unflatten_dense_tensors(flat[0], chunk);
        for (size_t i = 0; i < chunk.size(); ++i) chunk[i].copy_(parts[i]);
      }
      begin = end;
    }
  }
}

void assert_same_values(Context& ctx, const std::vector<torch::Tensor>& tensors, const std::string& what) {
  auto hashes = allgather_int64(*ctx.group(), ctx.world_size(), static_cast<int64_t>(tensors_hash(tensors)),
                                "in-sync check");
  std::string ranks;
  for (int r = 1; r < ctx.world_size(); ++r) {
    if (hashes[r] != hashes[0]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!ranks.empty()) {
    throw Error(ctx.rank(), what + " differ across ranks: rank(s) " + ranks + " differ from rank 0");
  }
}

}  // namespace cohort::detail
