// A small model trained on a device mesh, for the tests of checkpoints across meshes (issue 47):
// a vocabulary-parallel embedding, two blocks (column-parallel fc1, tanh, row-parallel fc2, a
// residual) and a column-parallel head whose logits go to the vocabulary-parallel cross-entropy —
// 4 layers, cut into 2 pipeline stages of 2 at pp=2 (the GPipe executor), all on one stage at pp=1.
// On dp: each dp rank runs its share of the global batch's microbatches, gradients are summed over
// dp, and the optimizer's state is sharded ZeRO-1 style: each dp rank's Adam holds a flat 1/dp of
// every parameter's piece, updates it, and the dp ranks allgather the pieces again.
// Every mesh runs the same arithmetic where the reduction order allows: each microbatch's loss is
// divided by the number of microbatches, and the same microbatches' gradients are summed (by
// autograd's accumulation or by a 2-rank allreduce: a + b either way), so dp and pp give one
// process's values bit for bit; tp sums partial products in another order (within ~1e-6).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format/training_state.h"
#include "cohort/checkpointer.h"
#include "cohort/device_mesh.h"
#include "cohort/mesh_checkpoint.h"
#include "parallel/pipeline/executor.h"
#include "parallel/tensor/vocab_parallel.h"

namespace cohort::testing::mesh {

namespace tpar = cohort::tensor_parallel;

inline constexpr int64_t kVocab = 16, kHidden = 8, kSeq = 4, kPerMicro = 2, kMicrobatches = 2;

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  std::string text() const {
    return "(dp, tp, pp) = (" + std::to_string(dp) + ", " + std::to_string(tp) + ", " + std::to_string(pp) + ")";
  }
};

/// The un-split model's parameters by name, drawn once from a seed (on the test's thread).
using FullWeights = std::vector<std::pair<std::string, at::Tensor>>;
inline FullWeights draw_weights(int64_t hidden = kHidden) {
  torch::manual_seed(5);
  FullWeights w;
  w.emplace_back("embed.weight", torch::randn({kVocab, hidden}));
  for (int b = 0; b < 2; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    torch::nn::Linear fc1(hidden, 4 * hidden), fc2(4 * hidden, hidden);
    w.emplace_back(p + "fc1.weight", fc1->weight.detach().clone());
    w.emplace_back(p + "fc1.bias", fc1->bias.detach().clone());
    w.emplace_back(p + "fc2.weight", fc2->weight.detach().clone());
    w.emplace_back(p + "fc2.bias", fc2->bias.detach().clone());
  }
  torch::nn::Linear head(hidden, kVocab);
  w.emplace_back("head.weight", head->weight.detach().clone());
  w.emplace_back("head.bias", head->bias.detach().clone());
  return w;
}
inline at::Tensor weight_of(const FullWeights& w, const std::string& name) {
  for (const auto& [n, t] : w)
    if (n == name) return t;
  return {};
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(const FullWeights& w, const std::string& p, const tpar::TpGroup& tp)
      : fc1(register_module("fc1", tpar::ColumnParallelLinear(weight_of(w, p + "fc1.weight"), weight_of(w, p + "fc1.bias"), tp))),
        fc2(register_module("fc2", tpar::RowParallelLinear(weight_of(w, p + "fc2.weight"), weight_of(w, p + "fc2.bias"), tp))) {}
  at::Tensor forward(const at::Tensor& x) { return x + fc2->forward(torch::tanh(fc1->forward(x))); }
  tpar::ColumnParallelLinear fc1;
  tpar::RowParallelLinear fc2;
};
TORCH_MODULE(Block);

struct EmbedImpl : torch::nn::Module {
  EmbedImpl(const at::Tensor& whole, const tpar::TpGroup& tp) : e(register_module("e", tpar::VocabParallelEmbedding(whole, tp))) {}
  at::Tensor forward(const at::Tensor& ids) { return e->forward(ids); }
  tpar::VocabParallelEmbedding e;
};
TORCH_MODULE(Embed);

/// The global batch number n's microbatch i: tokens [kPerMicro, kSeq + 1], a pure function of (n, i).
inline at::Tensor tokens_of(int64_t n, int64_t i) {
  auto t = torch::empty({kPerMicro, kSeq + 1}, torch::kLong);
  for (int64_t s = 0; s < kPerMicro; ++s)
    for (int64_t k = 0; k <= kSeq; ++k) t[s][k] = (n * 131 + i * 37 + s * 17 + k * 5 + k * k * 3) % kVocab;
  return t;
}

/// The data's position: the next global batch (a Stateful the checkpoint carries).
struct DataCursor : Stateful {
  int64_t next = 0;
  std::string state_dict() const override { return std::to_string(next); }
  void load_state_dict(const std::string& s) override { next = std::stoll(s); }
};

/// One rank's part of the model on the mesh, with its ZeRO-1 optimizer over dp.
class MeshTrainer : public torch::nn::Module, public MeshCheckpointable {
 public:
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    int tp_dim;
    at::Tensor local, shard;
    int64_t begin = 0, end = 0;  // the shard's elements of the flattened piece
  };

  MeshTrainer(std::shared_ptr<Context> ctx, MeshShape s, const FullWeights& w)
      : shape_(s), mesh_(ctx, {{"pp", s.pp}, {"dp", s.dp}, {"tp", s.tp}}) {
    tp_ = tpar::TpGroup{mesh_.group("tp"), ctx->rank()};
    const int stage = mesh_.coordinate("pp");
    const int first = s.pp == 1 ? 0 : 2 * stage, last = s.pp == 1 ? 4 : first + 2;
    stage_ = register_module("stage", torch::nn::Sequential());
    for (int layer = first; layer < last; ++layer) {
      if (layer == 0) {
        stage_->push_back(Embed(weight_of(w, "embed.weight"), tp_));
        add("embed.weight", stage_[0]->as<Embed>()->e->weight, 0, w);
      } else if (layer <= 2) {
        const std::string p = "blocks." + std::to_string(layer - 1) + ".";
        Block b(w, p, tp_);
        stage_->push_back(b);
        add(p + "fc1.weight", b->fc1->weight, 0, w);
        add(p + "fc1.bias", b->fc1->bias, 0, w);
        add(p + "fc2.weight", b->fc2->weight, 1, w);
        add(p + "fc2.bias", b->fc2->bias, -1, w);
      } else {
        tpar::ColumnParallelLinear head(weight_of(w, "head.weight"), weight_of(w, "head.bias"), tp_);
        stage_->push_back(head);
        add("head.weight", head->weight, 0, w);
        add("head.bias", head->bias, 0, w);
      }
    }
    std::vector<at::Tensor> shards;
    for (auto& p : params_) shards.push_back(p.shard);
    optimizer = std::make_unique<torch::optim::Adam>(shards, torch::optim::AdamOptions(1e-2));
  }

  const DeviceMesh& checkpoint_mesh() const override { return mesh_; }
  std::vector<MeshParameter> mesh_parameters() override {
    std::vector<MeshParameter> out;
    for (auto& p : params_) out.push_back({p.name, p.shape, p.tp_dim, mesh_.coordinate("pp"), p.local, p.shard, p.begin});
    return out;
  }
  void mesh_state_loaded() override {
    torch::NoGradGuard no_grad;
    for (auto& p : params_) p.shard.copy_(p.local.detach().reshape(-1).slice(0, p.begin, p.end));
  }
  const std::vector<Param>& params() const { return params_; }
  const DeviceMesh& mesh() const { return mesh_; }

  /// One optimizer step on global batch n.
  void train_step(int64_t n) {
    for (auto& p : params_) p.local.mutable_grad() = at::Tensor();
    const int dp = mesh_.coordinate("dp");
    std::vector<int64_t> mine;
    for (int64_t i = dp; i < kMicrobatches; i += shape_.dp) mine.push_back(i);
    const auto loss = [&](const at::Tensor& logits, const at::Tensor& target) {
      return tpar::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape(-1), tp_).mean();
    };
    if (shape_.pp == 1) {
      for (int64_t i : mine) {
        const at::Tensor t = tokens_of(n, i);
        (loss(stage_->forward(t.narrow(1, 0, kSeq)), t.narrow(1, 1, kSeq)) / kMicrobatches).backward();
      }
    } else {  // the executor divides by its own microbatch count: dp = 1 here (one pipeline)
      pipeline::StepData data;
      for (int64_t i : mine) {
        const at::Tensor t = tokens_of(n, i);
        data.inputs.push_back(t.narrow(1, 0, kSeq));
        data.targets.push_back(t.narrow(1, 1, kSeq));
      }
      const auto schedule = pipeline::make_schedule(pipeline::ScheduleKind::gpipe, shape_.pp, 1, static_cast<int>(mine.size()));
      std::map<int, torch::nn::Sequential> stages{{mesh_.coordinate("pp"), stage_}};
      pipeline::run_schedule(schedule, mesh_.coordinate("pp"), stages, *mesh_.group("pp"), data, loss);
    }
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      at::Tensor g = p.local.grad();
      if (shape_.dp > 1) {
        std::vector<at::Tensor> io{g};
        mesh_.group("dp")->allreduce(io)->wait();  // a + b: the same sum as one process's accumulation
      }
      p.shard.mutable_grad() = g.reshape(-1).slice(0, p.begin, p.end).clone();
    }
    optimizer->step();
    for (auto& p : params_) {  // the dp ranks' shards, gathered into the piece again
      if (shape_.dp == 1) {
        p.local.detach().reshape(-1).copy_(p.shard);
        continue;
      }
      const int64_t per = (p.local.numel() + shape_.dp - 1) / shape_.dp;
      at::Tensor mine_padded = torch::zeros({per});
      mine_padded.slice(0, 0, p.end - p.begin).copy_(p.shard);
      std::vector<std::vector<at::Tensor>> out(1);
      for (int r = 0; r < shape_.dp; ++r) out[0].push_back(torch::empty({per}));
      std::vector<at::Tensor> in{mine_padded};
      mesh_.group("dp")->allgather(out, in)->wait();
      p.local.detach().view(-1).copy_(torch::cat(out[0]).slice(0, 0, p.local.numel()));
    }
  }

  std::unique_ptr<torch::optim::Adam> optimizer;

 private:
  void add(const std::string& name, const at::Tensor& local, int tp_dim, const FullWeights& w) {
    Param p{name, weight_of(w, name).sizes().vec(), tp_dim, local, {}, 0, 0};
    const int64_t n = local.numel(), per = (n + shape_.dp - 1) / shape_.dp, d = mesh_.coordinate("dp");
    p.begin = std::min(n, per * d);
    p.end = std::min(n, per * (d + 1));
    p.shard = local.detach().reshape(-1).slice(0, p.begin, p.end).clone().requires_grad_(true);
    params_.push_back(std::move(p));
  }

  MeshShape shape_;
  DeviceMesh mesh_;
  tpar::TpGroup tp_;
  torch::nn::Sequential stage_{nullptr};
  std::vector<Param> params_;
};

}  // namespace cohort::testing::mesh
