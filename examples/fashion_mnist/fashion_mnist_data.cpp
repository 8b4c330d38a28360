#include "fashion_mnist_data.h"

#include <sys/stat.h>

#include "cohort/error.h"
#include "cohort/sharded_dataset.h"
#include "idx.h"

namespace {

// A record data set from `cohort data prepare --idx IMAGES LABELS` (784 image bytes, then the
// label), read whole: 47 MB for the training set, the same tensors the IDX files give.
void read_prepared(const std::string& dir, int rank, torch::Tensor& images, torch::Tensor& labels) {
  cohort::ShardedDatasetOptions o;
  o.seq_len = 1;  // ignored for records; lets a token data set open, to be named below
  o.global_batch = 1;
  o.shuffle = false;
  o.prefetch_batches = 0;
  const cohort::ShardedDataset probe(dir, 0, 1, o);
  if (probe.record_bytes() != 785)
    throw cohort::ConfigError(rank, dir + " holds " + (probe.record_bytes() == 0 ? std::string("tokens") : "records of " + std::to_string(probe.record_bytes()) + " bytes") +
                                        "; a prepared Fashion-MNIST holds records of 785 (cohort data prepare --idx IMAGES LABELS)");
  o.global_batch = static_cast<int64_t>(probe.samples());
  cohort::ShardedDataset all(dir, 0, 1, o);
  const torch::Tensor records = all.get_batch(static_cast<size_t>(o.global_batch))->data;  // uint8 [N, 785]
  images = records.narrow(1, 0, 784).reshape({-1, 28, 28});
  labels = records.select(1, 784).contiguous();
}

}  // namespace

FashionMnist::FashionMnist(const std::string& dir, bool train, int rank) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw cohort::ConfigError(rank, "Fashion-MNIST directory not found: " + dir +
                                        " (install Debian's dataset-fashion-mnist, or pass --data DIR)");
  }
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  std::string images_name = prefix + "-images-idx3-ubyte", labels_name = prefix + "-labels-idx1-ubyte";
  torch::Tensor images, labels;
  if (::stat((prefix + "/manifest.json").c_str(), &st) == 0) {  // DIR/train, DIR/t10k: prepared record data sets
    read_prepared(prefix, rank, images, labels);
    images_name = labels_name = prefix;
  } else {
    images = cohort::read_idx(images_name, rank);
    labels = cohort::read_idx(labels_name, rank);
  }
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    throw cohort::ConfigError(rank, "Fashion-MNIST files in " + dir + " have unexpected shapes");
  }
  // What the models and the loss take, checked here: past this point a wrong size or label is a
  // libtorch error many lines long, in the middle of training.
  if (images.size(0) == 0)
    throw cohort::ConfigError(rank, images_name + " holds no images (a data set to train on needs some)");
  if (images.size(1) != 28 || images.size(2) != 28)
    throw cohort::ConfigError(rank, images_name + " holds " + std::to_string(images.size(1)) + " x " +
                                        std::to_string(images.size(2)) + " images; the models take 28 x 28");
  const auto [low, high] = torch::aminmax(labels.to(torch::kLong));
  if (low.item<int64_t>() < 0 || high.item<int64_t>() > 9)
    throw cohort::ConfigError(rank, labels_name + " holds label " +
                                        std::to_string(low.item<int64_t>() < 0 ? low.item<int64_t>() : high.item<int64_t>()) +
                                        "; Fashion-MNIST's classes are 0 to 9");
  // Mean and standard deviation of the Fashion-MNIST training images.
  images_ = images.to(torch::kFloat).div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1).contiguous();
  labels_ = labels.to(torch::kLong);
}

torch::data::Example<> FashionMnist::get_batch(std::vector<size_t> indices) {
  auto idx = torch::from_blob(indices.data(), {static_cast<int64_t>(indices.size())}, torch::kLong);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}
