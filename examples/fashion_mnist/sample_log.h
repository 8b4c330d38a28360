// --log-samples PREFIX: which samples every step trained on, so that a test can check that each
// sample of an epoch is consumed exactly once across restarts and membership changes (the
// elastic launcher test does). Not needed for training; off unless the flag is given.
//
// Each rank appends JSON lines to PREFIX.rank<R> (O_APPEND, one write() per line, so a worker
// killed mid-write leaves at most one partial last line, which a reader skips):
//   {"round":n,"world":W,"rank":r,"resumed_step":s}                 once per start (s = 0: fresh)
//   {"round":n,"world":W,"rank":r,"step":k,"epoch":e,"samples":[...]}  after every optimizer step
//   {"round":n,"world":W,"rank":r,"done":k}                         after its maybe_save returned
// `round` is COHORT_RESTART_COUNT. A step is logged before the checkpoint that may include it is
// saved, so every step a checkpoint covers is in the log; "done" is where cohort counts the step
// finished (and where the example reports it to the monitor): how far a restart went back is
// counted from there.
#pragma once

#include <cohort/cohort.h>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

class SampleLog {
 public:
  /// The loader's sampler: the job's DistributedSampler, noting each batch's indices for the log.
  class Sampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
   public:
    Sampler(cohort::DistributedSampler inner, std::shared_ptr<std::vector<size_t>> last)
        : inner_(std::move(inner)), last_(std::move(last)) {}
    void reset(torch::optional<size_t> new_size = torch::nullopt) override { inner_.reset(new_size); }
    torch::optional<std::vector<size_t>> next(size_t batch_size) override {
      auto batch = inner_.next(batch_size);
      if (batch) *last_ = *batch;  // with DataLoaderOptions.workers 0: the batch the loop gets next
      return batch;
    }
    void save(torch::serialize::OutputArchive& archive) const override { inner_.save(archive); }
    void load(torch::serialize::InputArchive& archive) override { inner_.load(archive); }

   private:
    cohort::DistributedSampler inner_;  // a handle: shares its state with the caller's copy
    std::shared_ptr<std::vector<size_t>> last_;
  };

  /// Empty prefix: logs nothing.
  SampleLog(const std::string& prefix, int rank, int world) : rank_(rank), world_(world) {
    const char* round = std::getenv("COHORT_RESTART_COUNT");
    round_ = round ? std::atoi(round) : 0;
    if (prefix.empty()) return;
    const std::string path = prefix + ".rank" + std::to_string(rank);
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw cohort::ConfigError(rank, "cannot open --log-samples file " + path);
  }
  ~SampleLog() {
    if (fd_ >= 0) close(fd_);
  }
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  Sampler sampler(cohort::DistributedSampler inner) const { return Sampler(std::move(inner), last_); }

  void started(int64_t resumed_step) {
    nlohmann::json line = head();
    line["resumed_step"] = resumed_step;
    write(line);
  }

  void step(int64_t step, int64_t epoch) {
    nlohmann::json line = head();
    line["step"] = step;
    line["epoch"] = epoch;
    line["samples"] = *last_;
    write(line);
  }

  void done(int64_t step) {
    nlohmann::json line = head();
    line["done"] = step;
    write(line);
  }

 private:
  nlohmann::json head() const { return {{"round", round_}, {"world", world_}, {"rank", rank_}}; }
  void write(const nlohmann::json& line) {
    if (fd_ < 0) return;
    const std::string text = line.dump() + "\n";
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      throw cohort::CheckpointError(rank_, "cannot append to the --log-samples file");
    }
  }

  int fd_ = -1;
  int rank_, world_, round_ = 0;
  std::shared_ptr<std::vector<size_t>> last_ = std::make_shared<std::vector<size_t>>();
};
