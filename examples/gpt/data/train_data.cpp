// The GPT example's batches: the corpus's windows or a prepared data set. See train_data.h.
#include "data/train_data.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace {

cohort::ShardedDatasetOptions prepared_options(const Options& o, int64_t global_batch, bool shuffle) {
  cohort::ShardedDatasetOptions d;
  d.seq_len = o.model.seq_len;
  d.global_batch = global_batch;
  d.seed = o.seed;
  d.shuffle = shuffle;
  d.cache_dir = o.data_cache;  // --data (or --val-data) at an http(s) URL
  return d;
}

// The first `windows` windows of `dir` in data set order, as one token stream (consecutive
// windows share their boundary token), for evaluate()'s TokenWindows.
torch::Tensor validation_stream(const std::string& dir, const Options& o, int64_t windows) {
  cohort::ShardedDatasetOptions d = prepared_options(o, 1, /*shuffle=*/false);
  d.prefetch_batches = 0;
  cohort::ShardedDataset data(dir, 0, 1, d);
  windows = std::min<int64_t>(windows, static_cast<int64_t>(data.samples()));
  d.global_batch = std::max<int64_t>(windows, 1);
  cohort::ShardedDataset all(dir, 0, 1, d);
  const auto batch = all.get_batch(static_cast<size_t>(d.global_batch));
  const torch::Tensor tokens = torch::cat({batch->data, batch->target.narrow(1, batch->target.size(1) - 1, 1)}, 1);  // [n, T + 1]
  return torch::cat({tokens.narrow(1, 0, o.model.seq_len).reshape({-1}), tokens[-1].narrow(0, o.model.seq_len, 1)});
}

}  // namespace

Corpus load_prepared(Options& o, int rank, int world) {
  Corpus c;
  const bool remote = o.data.rfind("http://", 0) == 0 || o.data.rfind("https://", 0) == 0;
  if (remote && o.data_cache.empty())
    throw cohort::ConfigError(rank, "--data " + o.data + ": a data set at a URL needs --data-cache DIR (the folder its shards are cached in)");
  {
    // The vocabulary first: it sizes the model, and the windows' length is the model's seq_len.
    cohort::ShardedDatasetOptions probe = prepared_options(o, world, true);
    probe.prefetch_batches = 0;
    const cohort::ShardedDataset data(o.data, rank, world, probe);
    if (data.vocab_size() == 0) throw cohort::ConfigError(rank, "--data " + o.data + " holds records, not tokens");
    const int64_t vocab = std::max<int64_t>(256, static_cast<int64_t>(data.vocab_size()));
    o.model.vocab = std::max(o.model.vocab, vocab);  // a larger table (a preset's, --vocab) only pads
    c.tokenizer_model = data.tokenizer_model();
  }
  c.prepared = std::make_shared<cohort::ShardedDataset>(o.data, rank, world, prepared_options(o, int64_t{o.batch} * world, true));
  c.val = validation_stream(o.val_data.empty() ? o.data : o.val_data, o, std::max<int64_t>(o.eval_windows, world));
  c.files = 0;
  c.unigram_entropy = NAN;  // not computed over a data set that is never read whole
  return c;
}

std::string decode_tokens(const std::string& model, const std::vector<int64_t>& ids) {
  if (model.empty()) return std::string(ids.begin(), ids.end());  // bytes
  // The ids as spm_decode reads them: libsentencepiece carries its own protobuf, which clashes with
  // libtorch's in one process (a SIGSEGV while loading), so the example does not decode them itself.
  std::string text;
  for (const int64_t id : ids) text += (text.empty() ? "" : " ") + std::to_string(id);
  return text;
}

TrainBatches::TrainBatches(const Corpus& corpus, std::shared_ptr<cohort::Context> ctx, const Options& o)
    : ctx_(std::move(ctx)), o_(o), prepared_(corpus.prepared) {
  cohort::Context& c = *ctx_;
  if (prepared_) return;  // its own checks (a global batch larger than the data set, ...) ran at open
  windows_ = std::make_unique<TokenWindows>(corpus.train, o.model.seq_len);
  if (static_cast<int64_t>(*windows_->size()) < c.world_size() * o.batch)
    throw cohort::ConfigError(c.rank(), "the corpus is too small for --seq-len " + std::to_string(o.model.seq_len) +
                                            " and --batch " + std::to_string(o.batch) + " on " +
                                            std::to_string(c.world_size()) + " ranks");
  sampler_ = std::make_shared<cohort::DistributedSampler>(*windows_->size(), ctx_,
                                                          cohort::SamplerOptions{.shuffle = true, .seed = o.seed});
}

void TrainBatches::start() {
  it_.reset();
  if (prepared_) {
    prepared_loader_ = torch::data::make_data_loader(*prepared_, torch::data::DataLoaderOptions(static_cast<size_t>(prepared_->local_batch())));
  } else {
    window_loader_ = torch::data::make_data_loader(*windows_, *sampler_, torch::data::DataLoaderOptions(o_.batch));
  }
}

torch::data::Example<> TrainBatches::next() {
  if (!it_ && !prepared_) epoch_ = sampler_->epoch();  // after start(): where a restore left the sampler
  // The iterator fetches a batch when it moves: moved only now, when the next batch is wanted, the
  // sampler's or data set's position at a checkpoint counts the batches trained on, no more.
  if (it_) ++*it_;
  // An epoch has at least one batch (checked at construction), so this ends after one new begin().
  for (;;) {
    if (it_) {
      const bool ended = prepared_ ? *it_ == prepared_loader_->end() : *it_ == window_loader_->end();
      if (!ended) break;
      if (!prepared_) ++epoch_, hashed_ = 0;  // a prepared data set's begin() (its reset()) starts the next epoch itself
    }
    if (prepared_) {
      it_ = std::make_unique<torch::data::Iterator<torch::data::Example<>>>(prepared_loader_->begin());
    } else {
      sampler_->set_epoch(epoch_);  // the epoch a restored sampler is in goes on where it was
      it_ = std::make_unique<torch::data::Iterator<torch::data::Example<>>>(window_loader_->begin());
    }
  }
  torch::data::Example<> batch = **it_;
  if (o_.print_batch_hashes) print_hash(batch);
  return batch;
}

cohort::UserStates TrainBatches::states(cohort::UserStates user) const {
  if (prepared_) user["data"] = prepared_.get();
  return user;
}

void TrainBatches::print_hash(const torch::data::Example<>& batch) {
  // Local row k of rank r is position k·W + r of the global batch, for the sampler as for the data
  // set: one allreduce of the rows each rank placed (zeros elsewhere) is the global batch in order.
  const int64_t world = ctx_->world_size(), rank = ctx_->rank();
  const int64_t rows = batch.data.size(0), t = batch.data.size(1);
  const torch::Tensor samples = torch::cat({batch.data, batch.target.narrow(1, t - 1, 1)}, 1).to(torch::kLong);
  torch::Tensor global = torch::zeros({rows * world, t + 1}, torch::kLong);
  global.index_copy_(0, torch::arange(rows, torch::kLong) * world + rank, samples);
  std::vector<torch::Tensor> all{global};
  if (world > 1) ctx_->group()->allreduce(all)->wait();
  std::string where;
  if (prepared_) {
    const cohort::ShardedDatasetState s = prepared_->state();
    where = std::to_string(s.epoch) + ":" + std::to_string(s.position - s.global_batch);
  } else {
    where = std::to_string(epoch_) + ":" + std::to_string(hashed_ * rows * world);
  }
  ++hashed_;
  if (rank != 0) return;
  std::ostringstream line;
  line << "data batch " << where << " " << std::hex << std::setw(16) << std::setfill('0') << cohort::tensors_hash({all[0]});
  std::cout << line.str() << std::endl;
}
