#include "checkpoint/format/training_state.h"

#include <ATen/Context.h>  // default generators
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/optim.h>  // the concrete optimizer and state types
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "cohort/distributed_sampler.h"  // SamplerState
#include "cohort/error.h"
#include "cohort/torch_compat.h"
#include "runtime/torch_compat_internal.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {
namespace {

using torch::optim::OptimizerParamState;
// field name -> saved tensor of one parameter; tensors of their own, which the state keeps
using Fields = std::map<std::string, at::Tensor>;

void put(NamedTensors& out, const std::string& prefix, const char* field, const at::Tensor& t) {
  if (t.defined()) out.emplace_back(prefix + "/" + field, t);
}
void put_step(NamedTensors& out, const std::string& prefix, int64_t step) {
  out.emplace_back(prefix + "/step", at::scalar_tensor(step, at::kLong));
}
at::Tensor take(const Fields& f, const char* field, const at::Device& device) {
  const auto it = f.find(field);
  return it == f.end() ? at::Tensor() : it->second.to(device);  // copied only to another device
}
int64_t take_step(const Fields& f) {
  const auto it = f.find("step");
  return it == f.end() ? 0 : it->second.item<int64_t>();
}

// One entry per optimizer type libtorch ships (LBFGS keeps history lists; not supported).
struct Codec {
  const char* type;
  bool (*is)(const torch::optim::Optimizer&);
  void (*save)(const OptimizerParamState&, const std::string& prefix, NamedTensors& out);
  std::unique_ptr<OptimizerParamState> (*load)(const Fields&, const at::Device&);
};

template <typename O>
bool is_a(const torch::optim::Optimizer& o) {
  return dynamic_cast<const O*>(&o) != nullptr;
}

template <typename S>
void save_adam_like(const OptimizerParamState& base, const std::string& p, NamedTensors& out) {
  const auto& s = static_cast<const S&>(base);
  put_step(out, p, s.step());
  put(out, p, "exp_avg", s.exp_avg());
  put(out, p, "exp_avg_sq", s.exp_avg_sq());
  put(out, p, "max_exp_avg_sq", s.max_exp_avg_sq());
}
template <typename S>
std::unique_ptr<OptimizerParamState> load_adam_like(const Fields& f, const at::Device& d) {
  auto s = std::make_unique<S>();
  s->step(take_step(f));
  s->exp_avg(take(f, "exp_avg", d));
  s->exp_avg_sq(take(f, "exp_avg_sq", d));
  s->max_exp_avg_sq(take(f, "max_exp_avg_sq", d));
  return s;
}

const std::vector<Codec>& codecs() {
  using namespace torch::optim;
  static const std::vector<Codec> kCodecs{
      {"SGD", is_a<SGD>,
       [](const OptimizerParamState& b, const std::string& p, NamedTensors& out) {
         put(out, p, "momentum_buffer", static_cast<const SGDParamState&>(b).momentum_buffer());
       },
       [](const Fields& f, const at::Device& d) -> std::unique_ptr<OptimizerParamState> {
         auto s = std::make_unique<SGDParamState>();
         s->momentum_buffer(take(f, "momentum_buffer", d));
         return s;
       }},
      {"Adam", is_a<Adam>, save_adam_like<AdamParamState>, load_adam_like<AdamParamState>},
      {"AdamW", is_a<AdamW>, save_adam_like<AdamWParamState>, load_adam_like<AdamWParamState>},
      {"RMSprop", is_a<RMSprop>,
       [](const OptimizerParamState& b, const std::string& p, NamedTensors& out) {
         const auto& s = static_cast<const RMSpropParamState&>(b);
         put_step(out, p, s.step());
         put(out, p, "square_avg", s.square_avg());
         put(out, p, "momentum_buffer", s.momentum_buffer());
         put(out, p, "grad_avg", s.grad_avg());
       },
       [](const Fields& f, const at::Device& d) -> std::unique_ptr<OptimizerParamState> {
         auto s = std::make_unique<RMSpropParamState>();
         s->step(take_step(f));
         s->square_avg(take(f, "square_avg", d));
         s->momentum_buffer(take(f, "momentum_buffer", d));
         s->grad_avg(take(f, "grad_avg", d));
         return s;
       }},
      {"Adagrad", is_a<Adagrad>,
       [](const OptimizerParamState& b, const std::string& p, NamedTensors& out) {
         const auto& s = static_cast<const AdagradParamState&>(b);
         put_step(out, p, s.step());
         put(out, p, "sum", s.sum());
       },
       [](const Fields& f, const at::Device& d) -> std::unique_ptr<OptimizerParamState> {
         auto s = std::make_unique<AdagradParamState>();
         s->step(take_step(f));
         s->sum(take(f, "sum", d));
         return s;
       }},
  };
  return kCodecs;
}

const Codec& codec_of(const torch::optim::Optimizer& optimizer, int rank) {
  for (const auto& c : codecs())
    if (c.is(optimizer)) return c;
  throw CheckpointError(rank, "cannot checkpoint this optimizer: supported are SGD, Adam, AdamW, RMSprop and Adagrad");
}

// "module.fc1.weight" for a parameter of the module, "group<g>/param<i>" for one outside it.
std::vector<std::vector<std::string>> parameter_names(const torch::optim::Optimizer& optimizer,
                                                      const torch::nn::Module& module) {
  std::map<const void*, std::string> by_impl;
  for (const auto& item : module.named_parameters()) by_impl[item.value().unsafeGetTensorImpl()] = item.key();
  std::vector<std::vector<std::string>> names;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    names.emplace_back();
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = by_impl.find(params[i].unsafeGetTensorImpl());
      names.back().push_back(it != by_impl.end() ? it->second
                                                 : "group" + std::to_string(g) + "/param" + std::to_string(i));
    }
  }
  return names;
}

}  // namespace

NamedTensors module_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

void load_module_tensors(torch::nn::Module& module, const TensorFileReader& file, int rank) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<const TensorEntry*, at::Tensor>> reads;
  std::set<std::string> used;
  for (auto& [name, tensor] : module_tensors(module)) {
    const TensorEntry* e = file.find(name);
    if (!e)
      throw CheckpointError(rank, file.name() + " has no tensor \"" + name + "\": the checkpoint is of another model");
    if (c10::IntArrayRef(e->shape) != tensor.sizes() || torch_dtype(e->dtype) != tensor.scalar_type()) {
      std::ostringstream os;
      os << file.name() << ": tensor \"" << name << "\" is " << torch_dtype(e->dtype) << c10::IntArrayRef(e->shape)
         << " in the checkpoint but " << tensor.scalar_type() << tensor.sizes() << " in the model";
      throw CheckpointError(rank, os.str());
    }
    reads.emplace_back(e, tensor);
    used.insert(name);
  }
  for (const auto& e : file.entries())
    if (!used.count(e.name))
      throw CheckpointError(rank, file.name() + " has a tensor \"" + e.name + "\" the model lacks: the checkpoint is of another model");
  for (auto& [e, tensor] : reads) file.read_into(*e, tensor);
}

NamedTensors optimizer_tensors(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                               std::string* description, int rank) {
  const Codec& codec = codec_of(optimizer, rank);
  const auto names = parameter_names(optimizer, module);
  NamedTensors out;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  const auto& state = optimizer.state();
  using StateMap = std::decay_t<decltype(state)>;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& group = optimizer.param_groups()[g];
    groups.push_back({{"lr", group.options().get_lr()}, {"params", group.params().size()}});
    for (size_t i = 0; i < group.params().size(); ++i) {
      const auto it = state.find(optimizer_state_key<StateMap>(group.params()[i]));
      if (it != state.end()) codec.save(*it->second, names[g][i], out);
    }
  }
  *description = nlohmann::ordered_json{{"type", codec.type}, {"groups", groups}}.dump();
  return out;
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                          const TensorFileReader& file, const std::string& description, int rank) {
  apply_optimizer_description(optimizer, description, rank);  // type, group count, learning rates
  const Codec& codec = codec_of(optimizer, rank);
  const auto groups = detail::parse_capped(description).at("groups");
  auto& param_groups = optimizer.param_groups();
  // Group the saved tensors by parameter: "name/field" -> fields[name][field].
  std::map<std::string, Fields> fields;
  for (const auto& e : file.entries()) {
    const auto slash = e.name.rfind('/');
    if (slash != std::string::npos) fields[e.name.substr(0, slash)][e.name.substr(slash + 1)] = file.read(e);
  }
  const auto names = parameter_names(optimizer, module);
  auto& state = optimizer.state();
  using StateMap = std::decay_t<decltype(state)>;
  size_t matched = 0;
  for (size_t g = 0; g < param_groups.size(); ++g) {
    auto& group = param_groups[g];
    if (groups[g].at("params").get<size_t>() != group.params().size())
      throw CheckpointError(rank, "the checkpoint's optimizer group " + std::to_string(g) + " has " +
                                      groups[g].at("params").dump() + " parameters, this one " +
                                      std::to_string(group.params().size()));
    for (size_t i = 0; i < group.params().size(); ++i) {
      const auto& p = group.params()[i];
      const auto key = optimizer_state_key<StateMap>(p);
      const auto it = fields.find(names[g][i]);
      if (it == fields.end()) {
        state.erase(key);  // no state yet when it was saved (before the first step)
        continue;
      }
      for (const auto& [field, t] : it->second)
        if (field != "step" && t.sizes() != p.sizes())
          throw CheckpointError(rank, "optimizer state \"" + names[g][i] + "/" + field +
                                          "\" does not have its parameter's shape: the checkpoint is of another model");
      state[key] = codec.load(it->second, p.device());
      ++matched;
    }
  }
  if (matched != fields.size())
    throw CheckpointError(rank, "the checkpoint has optimizer state for " + std::to_string(fields.size()) +
                                    " parameters, of which " + std::to_string(matched) +
                                    " belong to this optimizer: the checkpoint is of another model");
}

void param_state_tensors(const torch::optim::Optimizer& optimizer, const at::Tensor& param, const std::string& prefix,
                         NamedTensors& out, int rank) {
  const Codec& codec = codec_of(optimizer, rank);
  const auto& state = optimizer.state();
  using StateMap = std::decay_t<decltype(state)>;
  const auto it = state.find(optimizer_state_key<StateMap>(param));
  if (it != state.end()) codec.save(*it->second, prefix, out);
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     const std::map<std::string, at::Tensor>& fields, int rank) {
  const Codec& codec = codec_of(optimizer, rank);
  auto& state = optimizer.state();
  using StateMap = std::decay_t<decltype(state)>;
  if (fields.empty()) {
    state.erase(optimizer_state_key<StateMap>(param));
    return;
  }
  state[optimizer_state_key<StateMap>(param)] = codec.load(fields, param.device());
}

std::string optimizer_description(const torch::optim::Optimizer& optimizer, int rank) {
  const Codec& codec = codec_of(optimizer, rank);
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& group : optimizer.param_groups())
    groups.push_back({{"lr", group.options().get_lr()}, {"params", group.params().size()}});
  return nlohmann::ordered_json{{"type", codec.type}, {"groups", groups}}.dump();
}

void apply_optimizer_description(torch::optim::Optimizer& optimizer, const std::string& description, int rank) {
  const Codec& codec = codec_of(optimizer, rank);
  const auto j = detail::parse_capped(description);
  const std::string type = j.at("type").get<std::string>();
  if (type != codec.type)
    throw CheckpointError(rank, "the checkpoint holds " + type + " optimizer state but the optimizer is " + codec.type);
  const auto& groups = j.at("groups");
  auto& param_groups = optimizer.param_groups();
  if (groups.size() != param_groups.size())
    throw CheckpointError(rank, "the checkpoint's optimizer has " + std::to_string(groups.size()) +
                                    " parameter groups, this one " + std::to_string(param_groups.size()));
  for (size_t g = 0; g < param_groups.size(); ++g) param_groups[g].options().set_lr(groups[g].at("lr").get<double>());
}

void check_manifest_states(const Manifest& m, int rank) {
  // Manifest::parse checked the kinds (the optimizer description's, the RNG states' hex); what is
  // left depends on this program: the sampler's state type and this libtorch's generator.
  if (!m.sampler_json.empty()) {
    try {
      SamplerState::from_json(m.sampler_json);
    } catch (const std::exception& e) {
      throw CheckpointError(rank, std::string("the checkpoint's sampler state does not load: ") + e.what());
    }
  }
  const size_t cpu_state_bytes = at::detail::getDefaultCPUGenerator().get_state().nbytes();
  for (const auto& r : m.rng) {
    if (r.cpu.size() != 2 * cpu_state_bytes)
      throw CheckpointError(rank, "the checkpoint's CPU RNG state of rank " + std::to_string(r.rank) + " has " +
                                      std::to_string(r.cpu.size() / 2) + " bytes; this libtorch's has " +
                                      std::to_string(cpu_state_bytes));
  }
}

RankRng capture_rng(const torch::nn::Module& module, int rank) {
  RankRng out;
  out.rank = rank;
  auto cpu = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    const at::Tensor s = cpu.get_state();
    out.cpu = bytes_to_hex(s.data_ptr(), s.nbytes());
  }
  std::set<int> devices;
  for (const auto& p : module.parameters())
    if (p.is_cuda()) devices.insert(p.get_device());
  for (int d = 0; d <= (devices.empty() ? -1 : *devices.rbegin()); ++d) {
    auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    const at::Tensor s = gen.get_state();
    out.cuda.push_back(bytes_to_hex(s.data_ptr(), s.nbytes()));
  }
  return out;
}

void restore_rng(const RankRng& rng, int rank) {
  auto set = [&](at::Generator gen, const std::string& hex, const std::string& what) {
    std::vector<uint8_t> bytes;
    try {
      bytes = hex_to_bytes(hex);
    } catch (const std::exception& e) {
      throw CheckpointError(rank, "the checkpoint's " + what + " RNG state is not valid hex");
    }
    at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    std::lock_guard<std::mutex> lock(gen.mutex());
    try {
      gen.set_state(state);
    } catch (const c10::Error& e) {
      throw CheckpointError(rank, "the checkpoint's " + what + " RNG state does not fit this libtorch");
    }
  };
  set(at::detail::getDefaultCPUGenerator(), rng.cpu, "CPU");
  for (size_t d = 0; d < rng.cuda.size(); ++d)
    set(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d))),
        rng.cuda[d], "CUDA " + std::to_string(d));
}

}  // namespace cohort::ckpt
