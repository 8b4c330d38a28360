// What a checkpoint takes from, and gives back to, the training objects: a module's parameters
// and buffers, an optimizer's per-parameter state and learning rates, the RNG state. Tensors go
// into safetensors files under stable names; the rest is JSON for the manifest. Internal header.
//
// Optimizer state is read through the concrete state types of libtorch's optimizers (SGD, Adam,
// AdamW, RMSprop, Adagrad): libtorch has no generic way to enumerate it except its own pickle
// archive, which Python tools cannot read as tensors. Another optimizer is a clear error.
// Names: "<parameter name>/<field>", e.g. "module.fc1.weight/exp_avg"; step counts are 0-d int64
// tensors ("module.fc1.weight/step").
#pragma once

#include <string>

#include "checkpoint/format/manifest.h"
#include "checkpoint/format/tensor_file.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace cohort::ckpt {

/// Parameters then buffers, by their names in the module (not copied).
NamedTensors module_tensors(const torch::nn::Module& module);

/// Reads the file's tensors into the module's. Throws CheckpointError naming a missing, extra or
/// differently shaped tensor (before reading any).
void load_module_tensors(torch::nn::Module& module, const TensorFileReader& file, int rank);

/// The optimizer's state tensors (not copied) and its description for the manifest:
/// {"type": "Adam", "groups": [{"lr": 0.001, "params": 4}]}.
NamedTensors optimizer_tensors(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                               std::string* description, int rank);

/// Replaces the optimizer's state with the file's and sets the saved learning rates. Throws
/// CheckpointError when the checkpoint is of another optimizer type or parameter layout.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                          const TensorFileReader& file, const std::string& description, int rank);

// Sharded training (ShardedDataParallel): the optimizer holds flat shards, not the module's
// parameters, so state is read and written per tensor, and the description stands alone.
/// One tensor's optimizer state as "<prefix>/<field>" (not copied); nothing before its first step.
void param_state_tensors(const torch::optim::Optimizer& optimizer, const at::Tensor& param, const std::string& prefix,
                         NamedTensors& out, int rank);
/// Replaces one tensor's optimizer state with `fields` ("step", "exp_avg", ...), which it keeps
/// (not copied: tensors of their own, not views of something else).
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     const std::map<std::string, at::Tensor>& fields, int rank);
/// {"type": "Adam", "groups": [{"lr": 0.001, "params": 4}]}
std::string optimizer_description(const torch::optim::Optimizer& optimizer, int rank);
/// Checks the optimizer type and group count, and sets the saved learning rates.
void apply_optimizer_description(torch::optim::Optimizer& optimizer, const std::string& description, int rank);

/// Throws CheckpointError when a part of the manifest does not fit this program: sampler state
/// that does not load, a CPU RNG state of another size than this libtorch's generator's.
/// Restore checks these while it chooses a checkpoint, before anything is applied, so that a bad
/// part means the next older checkpoint instead of a half-restored one.
void check_manifest_states(const Manifest& manifest, int rank);

/// This process's RNG states: the CPU generator and the CUDA generators of the devices the
/// module's tensors are on.
RankRng capture_rng(const torch::nn::Module& module, int rank);
void restore_rng(const RankRng& rng, int rank);

}  // namespace cohort::ckpt
