// The README's program ("What a program looks like"), compiled as it stands there: CMake copies
// the block into readme_snippet.inc at configure time (tests/CMakeLists.txt), strictly C++17
// (-pedantic-errors), and this file gives it what the README leaves to the example: the
// Fashion-MNIST dataset, a model, the data folder and the number of epochs.
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "fashion_mnist_data.h"
#include "models.h"

namespace {
using Net = Mlp;  // the example's small model: one epoch on 2 ranks in seconds
const std::string data_dir = "/usr/share/datasets/fashion-mnist";
const int epochs = std::getenv("COHORT_README_EPOCHS") ? std::atoi(std::getenv("COHORT_README_EPOCHS")) : 1;
}  // namespace

#include "readme_snippet.inc"
