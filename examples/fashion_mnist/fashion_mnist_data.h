// Fashion-MNIST as a libtorch batch dataset: the whole set lives in two tensors, and a batch is
// one index_select (no per-sample tensors to stack).
#pragma once

#include <torch/torch.h>

#include <string>

class FashionMnist : public torch::data::datasets::BatchDataset<FashionMnist, torch::data::Example<>, std::vector<size_t>> {
 public:
  /// Reads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], or the record data sets
  /// `dir`/train and `dir`/t10k that `cohort data prepare --idx IMAGES LABELS` wrote (785-byte
  /// records: the image, then the label); throws cohort::ConfigError naming the missing file and
  /// what to do.
  FashionMnist(const std::string& dir, bool train, int rank);
  torch::data::Example<> get_batch(std::vector<size_t> indices) override;
  torch::optional<size_t> size() const override { return static_cast<size_t>(images_.size(0)); }
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Tensor images_;  // float [N, 1, 28, 28], normalised
  torch::Tensor labels_;  // int64 [N]
};
