// What the ```cpp blocks of README.md and docs/*.md leave to the reader's program, declared once
// for docs_code_test.sh: the data set, a model, a loader, an optimizer, ... Only declarations
// (`extern`): the blocks are compiled with -fsyntax-only, never linked or run. A block that
// declares one of these names itself shadows it (each block is the body of its own function).
#pragma once

#include <torch/torch.h>

#include <cohort/cohort.h>

#include <memory>
#include <string>
#include <utility>

#include "fashion_mnist_data.h"
#include "models.h"

namespace docs_context {
using Net = Mlp;
using Loader = decltype(torch::data::make_data_loader(std::declval<FashionMnist&>(),
                                                      std::declval<cohort::DistributedSampler&>(),
                                                      torch::data::DataLoaderOptions(64)));
}  // namespace docs_context

using docs_context::Net;
extern const std::string data_dir;
extern const int epochs;
extern double lr;
extern FashionMnist dataset;
extern Net net;
extern std::shared_ptr<cohort::Context> ctx;
extern cohort::DistributedSampler sampler;
extern docs_context::Loader loader;
extern cohort::DistributedDataParallel<Net> model;
extern torch::optim::SGD optimizer;
extern cohort::Checkpointer checkpoints;
extern torch::Tensor x, loss;
