#include "fashion_mnist_data.h"

#include <sys/stat.h>

#include "cohort/error.h"
#include "idx.h"

FashionMnist::FashionMnist(const std::string& dir, bool train, int rank) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw cohort::ConfigError(rank, "Fashion-MNIST directory not found: " + dir +
                                        " (install Debian's dataset-fashion-mnist, or pass --data DIR)");
  }
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto images = cohort::read_idx(prefix + "-images-idx3-ubyte", rank);
  auto labels = cohort::read_idx(prefix + "-labels-idx1-ubyte", rank);
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    throw cohort::ConfigError(rank, "Fashion-MNIST files in " + dir + " have unexpected shapes");
  }
  // Mean and standard deviation of the Fashion-MNIST training images.
  images_ = images.to(torch::kFloat).div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1).contiguous();
  labels_ = labels.to(torch::kLong);
}

torch::data::Example<> FashionMnist::get_batch(std::vector<size_t> indices) {
  auto idx = torch::from_blob(indices.data(), {static_cast<int64_t>(indices.size())}, torch::kLong);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}
