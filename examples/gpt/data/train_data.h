// The GPT example's training batches: the in-memory corpus's windows through cohort's
// DistributedSampler (--corpus, the default), or a data set prepared by `cohort data prepare`
// (--data DIR: memory-mapped shards, never read whole, cohort::ShardedDataset). One loop reads
// either through TrainBatches::next(); the checkpoint keeps the sampler's or the data set's
// position, so a resume — at another world size too, with the same global batch — trains on the
// same global batches.
//
// --print-batch-hashes (tests): rank 0 prints one line per global batch,
//   "data batch <epoch>:<position> <16 hex digits>"
// the hash of the whole global batch in position order (assembled with one allreduce), so that
// runs at different world sizes, stopped and resumed, can be compared line by line.
#pragma once

#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "gpt_model.h"
#include "options.h"

/// The prepared data set of --data as the example's corpus: the training set (rank `rank` of
/// `world`, global batch --batch × world), and a validation stream of tokens for evaluate() — from
/// --val-data, else the first --eval-windows windows of the data set itself (then not held out).
/// Sets o.model.vocab to the manifest's (at least 256; a larger --vocab or preset table is kept). Before init():
/// ranks come from the environment. Throws cohort::ConfigError naming the problem.
Corpus load_prepared(Options& o, int rank, int world);

/// The generated sample as text: for the bytes tokenizer (`model` empty), the bytes; for a
/// SentencePiece data set (`model`: its tokenizer.model), the ids separated by spaces, for
/// `spm_decode --model MODEL --input_format=id` (SentencePiece cannot load beside libtorch).
std::string decode_tokens(const std::string& model, const std::vector<int64_t>& ids);

/// `count` tokens sampled after `prompt` (temperature 0.8, top 40), the same on every rank: the
/// example's generate() for token ids of any vocabulary.
template <typename M>
std::vector<int64_t> generate_ids(M& model, const GptConfig& c, std::vector<int64_t> ids, int count, uint64_t seed,
                                  const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto gen = at::detail::createCPUGenerator(seed);
  const size_t prompt = ids.size();
  for (int i = 0; i < count; ++i) {
    const size_t from = ids.size() > static_cast<size_t>(c.positions) ? ids.size() - c.positions : 0;
    const std::vector<int64_t> window(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
    const torch::Tensor logits = model->forward(torch::tensor(window, torch::kLong).unsqueeze(0).to(device));
    const torch::Tensor last = logits[0][-1].to(torch::kCPU, torch::kFloat) / 0.8;
    auto [top, where] = last.topk(40);
    const int64_t pick = torch::multinomial(torch::softmax(top, 0), 1, false, gen).item<int64_t>();
    ids.push_back(where[pick].item<int64_t>());
  }
  model->train();
  return {ids.begin() + static_cast<std::ptrdiff_t>(prompt), ids.end()};
}

/// The batches of the training loop, epoch after epoch.
class TrainBatches {
 public:
  /// Over `corpus` (its prepared data set when it has one, else its training tokens) for the job.
  /// Throws ConfigError when the corpus is too small for the batch on these ranks.
  TrainBatches(const Corpus& corpus, std::shared_ptr<cohort::Context> ctx, const Options& o);
  /// A fresh loader over where the job is (after a restore too): call before the loop.
  void start();
  /// The next batch, going on into the next epoch at an epoch's end.
  torch::data::Example<> next();
  /// The sampler to checkpoint (null with --data: the data set is a user state then).
  cohort::DistributedSampler* sampler() { return sampler_.get(); }
  /// `user` plus the data set's state under "data" (with --data).
  cohort::UserStates states(cohort::UserStates user) const;

 private:
  void print_hash(const torch::data::Example<>& batch);
  using WindowLoader = torch::data::StatelessDataLoader<TokenWindows, cohort::DistributedSampler>;
  using PreparedLoader = torch::data::StatefulDataLoader<cohort::ShardedDataset>;
  std::shared_ptr<cohort::Context> ctx_;
  const Options& o_;
  std::shared_ptr<cohort::ShardedDataset> prepared_;
  std::unique_ptr<TokenWindows> windows_;
  std::shared_ptr<cohort::DistributedSampler> sampler_;
  std::unique_ptr<WindowLoader> window_loader_;
  std::unique_ptr<PreparedLoader> prepared_loader_;
  std::unique_ptr<torch::data::Iterator<torch::data::Example<>>> it_;
  int64_t epoch_ = 0;
  int64_t hashed_ = 0;  // global batches hashed (corpus runs: their positions)
};
