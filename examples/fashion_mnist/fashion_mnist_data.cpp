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
  // What the models and the loss take, checked here: past this point a wrong size or label is a
  // libtorch error many lines long, in the middle of training.
  if (images.size(0) == 0)
    throw cohort::ConfigError(rank, prefix + "-images-idx3-ubyte holds no images (a data set to train on needs some)");
  if (images.size(1) != 28 || images.size(2) != 28)
    throw cohort::ConfigError(rank, prefix + "-images-idx3-ubyte holds " + std::to_string(images.size(1)) + " x " +
                                        std::to_string(images.size(2)) + " images; the models take 28 x 28");
  const auto [low, high] = torch::aminmax(labels.to(torch::kLong));
  if (low.item<int64_t>() < 0 || high.item<int64_t>() > 9)
    throw cohort::ConfigError(rank, prefix + "-labels-idx1-ubyte holds label " +
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
