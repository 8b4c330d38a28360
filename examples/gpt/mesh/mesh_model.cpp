// MeshModel (mesh_model.h): the mesh, this rank's layers cut into stages, and the step's
// collectives across tp and pp.
#include "mesh/mesh_model.h"

#include <cohort/error.h>

#include <algorithm>

#include "parallel/pipeline/stages.h"

namespace gpt_mesh {
namespace pl = cohort::pipeline;

namespace {

using cohort::ConfigError;

int virtual_stages(const Options& o) { return o.virtual_stages > 0 ? o.virtual_stages : o.schedule == "interleaved" ? 2 : 1; }
int microbatches(const Options& o) { return o.microbatches > 0 ? o.microbatches : o.pp; }

template <typename Work>
void wait(const Work& work) {
  work->wait();
}

}  // namespace

pl::ScheduleKind schedule_kind(const std::string& name, int rank) {
  if (name == "interleaved") return pl::ScheduleKind::interleaved_1f1b;
  return pl::parse_schedule_name(name, rank);
}

void check_options(const Options& o, int world, int rank) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (o.tp < 1 || o.pp < 1 || o.dp < 0) throw ConfigError(rank, "--tp and --pp must be at least 1, --dp at least 0");
  if (o.mode != "ddp" || o.comm_hook != "none")
    throw ConfigError(rank, "--tp/--pp/--dp/--microbatches run with --mode ddp and no --comm-hook (got --mode " + o.mode +
                                ", --comm-hook " + o.comm_hook + ")");
  if (o.accum != 1) throw ConfigError(rank, "--accum " + n(o.accum) + ": on a mesh, --microbatches accumulates the gradients");
  if (o.snapshot_every > 0) throw ConfigError(rank, "--snapshot-every is not supported with --tp/--pp yet (--ckpt-dir is)");
  if (o.device != "cpu") throw ConfigError(rank, "--tp/--pp run on --device cpu (Gloo groups) for now");
  const GptConfig& c = o.model;
  if (c.heads % o.tp != 0)
    throw ConfigError(rank, "--heads " + n(c.heads) + " does not divide over --tp " + n(o.tp) + " ranks");
  if (c.vocab % o.tp != 0)
    throw ConfigError(rank, "--vocab " + n(c.vocab) + " does not divide over --tp " + n(o.tp) + " ranks");
  if (o.sequence_parallel && o.tp < 2) throw ConfigError(rank, "--sequence-parallel splits over --tp ranks: give --tp 2 or more");
  if (o.sequence_parallel && c.seq_len % o.tp != 0)
    throw ConfigError(rank, "--seq-len " + n(c.seq_len) + " does not divide over --tp " + n(o.tp) + " ranks (--sequence-parallel)");
  const int v = virtual_stages(o);
  if (c.layers % (o.pp * v) != 0)
    throw ConfigError(rank, "--layers " + n(c.layers) + " do not divide into " + n(o.pp * v) + " pipeline stages (--pp " +
                                n(o.pp) + " x " + n(v) + " virtual stages)");
  (void)pl::make_schedule(schedule_kind(o.schedule, rank), o.pp, v, microbatches(o), rank);  // its own line for m
  const int pipeline = o.tp * o.pp;
  if (o.dp > 0 && pipeline * o.dp != world)
    throw ConfigError(rank, "--pp " + n(o.pp) + " x --dp " + n(o.dp) + " x --tp " + n(o.tp) + " = " + n(pipeline * o.dp) +
                                " ranks, but the world has " + n(world));
  if (o.dp == 0 && world % pipeline != 0)
    throw ConfigError(rank, "--pp " + n(o.pp) + " x --tp " + n(o.tp) + " = " + n(pipeline) +
                                " ranks per model replica does not divide the world of " + n(world) + " ranks");
}

MeshModel::MeshModel(const std::shared_ptr<cohort::Context>& ctx, const Options& o)
    : rank_(ctx->rank()), cfg_(o.model), dtype_(o.f64 ? torch::kDouble : torch::kFloat), sp_(o.sequence_parallel) {
  check_options(o, ctx->world_size(), ctx->rank());
  const int dp = o.dp > 0 ? o.dp : ctx->world_size() / (o.tp * o.pp);
  mesh_ = std::make_unique<cohort::DeviceMesh>(ctx, std::vector<cohort::MeshDim>{{"pp", o.pp}, {"dp", dp}, {"tp", o.tp}});
  schedule_ = pl::make_schedule(schedule_kind(o.schedule, ctx->rank()), o.pp, virtual_stages(o), microbatches(o), ctx->rank());
  pp_rank_ = mesh_->coordinate("pp");
  tp_ = TpGroup{mesh_->group("tp"), ctx->rank()};
  tied_grads_ = std::make_unique<pl::TiedGradients>(ctx, *mesh_, schedule_);

  // The one-process model, seeded as its run is; this rank keeps its part of it.
  torch::manual_seed(o.seed);
  torch::nn::Sequential whole = make_gpt(cfg_);
  torch::nn::Sequential layers = o.tp > 1 ? make_tp_gpt(whole, cfg_, tp_, sp_) : whole;
  layers->to(dtype_);  // float32's values, widened, where the one-process run widens them too
  const int64_t L = cfg_.layers, S = schedule_.stages(), per_stage = L / S;
  torch::nn::Sequential blocks;
  for (int64_t l = 0; l < L; ++l) blocks->push_back(*(layers->begin() + 1 + l));
  for (auto& [s, part] : pl::stages_of_rank(blocks, schedule_, pp_rank_, ctx->rank())) {
    torch::nn::Sequential stage;
    if (s == 0) stage->push_back("embed", *layers->begin());
    int64_t i = 0;
    for (const auto& item : part->named_children()) stage->push_back("block" + item.key(), *(part->begin() + i++));
    if (s == S - 1) stage->push_back("head", *(layers->begin() + L + 1));
    stages_[s] = stage;
  }
  const int first = schedule_.rank_of(0), last = schedule_.rank_of(static_cast<int>(S - 1));
  if (pp_rank_ == first || pp_rank_ == last) {
    tied_ = o.tp > 1 ? std::dynamic_pointer_cast<TpEmbedImpl>(layers->ptr(0))->wte->weight
                     : std::dynamic_pointer_cast<EmbedImpl>(layers->ptr(0))->wte->weight;
    // The head's copy, a parameter of the last stage: ZB-H1's W computes the stage's parameters'.
    if (pp_rank_ != first) stages_.at(static_cast<int>(S - 1))->register_parameter("tied_wte", tied_);
  }
  // What DDP wraps and the optimizer steps: the stages as children (never run through it).
  for (auto& [s, stage] : stages_) local_->register_module("stage" + std::to_string(s), stage);

  for (const auto& item : whole->named_parameters()) {
    Full f;
    f.name = item.key();
    f.shape = item.value().sizes().vec();
    f.layout = o.tp > 1 ? tp_layout(f.name) : TpLayout{};
    if (f.name.rfind("embed.", 0) == 0) f.owner = first;
    else if (f.name.rfind("head.", 0) == 0) f.owner = last;
    else f.owner = schedule_.rank_of(static_cast<int>(std::stoll(f.name.substr(5, f.name.find('.') - 5)) / per_stage));
    if (f.owner == pp_rank_) {
      for (auto& [s, stage] : stages_) {
        auto params = stage->named_parameters();
        if (auto* p = params.find(f.name)) f.local = *p;
      }
      if (!f.local.defined()) throw std::logic_error("gpt: this rank holds no " + f.name);
    }
    full_.push_back(std::move(f));
  }
}

torch::Tensor MeshModel::loss(const torch::Tensor& out, const torch::Tensor& target) const {
  if (tp_.size() > 1) return cohort::tensor_parallel::vocab_parallel_cross_entropy(out, target, tp_).mean();
  return lm_loss(out, target);
}

double MeshModel::run_step(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  const pl::StepData data{inputs, targets};
  const double mean = pl::run_schedule(schedule_, pp_rank_, stages_, *mesh_->group("pp"), data,
                                       [this](const torch::Tensor& out, const torch::Tensor& target) { return loss(out, target); });
  if (sp_) {  // LayerNorms, row-parallel biases, the position table: one allreduce of them all
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    for (auto& [s, stage] : stages_)
      for (const auto& item : stage->named_parameters())
        if (tp_layout(item.key()).dim < 0 && item.key() != "tied_wte" && item.value().grad().defined()) grads.push_back(item.value().grad());
    if (!grads.empty()) {
      std::vector<torch::Tensor> views;
      for (const auto& g : grads) views.push_back(g.reshape({-1}));
      std::vector<torch::Tensor> flat{torch::cat(views)};
      wait(mesh_->group("tp")->allreduce(flat));
      int64_t at = 0;
      for (auto& g : grads) {
        g.copy_(flat[0].narrow(0, at, g.numel()).view_as(g));
        at += g.numel();
      }
    }
  }
  return mean;
}

void MeshModel::sum_tied() {
  if (tied_.defined()) tied_grads_->sum({tied_});
}

torch::Tensor MeshModel::grad_norm() {
  torch::NoGradGuard no_grad;
  const auto zero = torch::zeros({}, dtype_);
  std::vector<torch::Tensor> norms, squares;
  std::vector<size_t> squared;
  for (size_t i = 0; i < full_.size(); ++i) {
    const Full& f = full_[i];
    norms.push_back(zero);
    if (f.owner != pp_rank_ || !f.local.grad().defined()) continue;
    if (f.layout.dim >= 0) {
      squares.push_back(f.local.grad().to(torch::kDouble).pow(2).sum());
      squared.push_back(i);
    } else {
      norms[i] = f.local.grad().norm(2.0);
    }
  }
  if (!squares.empty()) {  // the same list on every tp rank of a stage: the same collective
    std::vector<torch::Tensor> t{torch::stack(squares)};
    wait(mesh_->group("tp")->allreduce(t));
    const auto roots = t[0].sqrt().to(dtype_);
    for (size_t k = 0; k < squared.size(); ++k) norms[squared[k]] = roots[static_cast<int64_t>(k)];
  }
  std::vector<torch::Tensor> all{torch::stack(norms)};  // each parameter's norm where its stage lives, 0 elsewhere
  if (mesh_->size("pp") > 1) wait(mesh_->group("pp")->allreduce(all));
  return all[0].norm(2.0);
}

void MeshModel::clip(const torch::Tensor& total, double max_norm) {
  torch::NoGradGuard no_grad;
  const auto coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (auto& p : local_->parameters())
    if (p.grad().defined()) p.grad().mul_(coef);
}

std::vector<torch::Tensor> MeshModel::full_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (const Full& f : full_) {
    torch::Tensor t;
    if (f.owner == pp_rank_) {
      t = f.local.detach().contiguous().clone();
      if (f.layout.dim >= 0) {
        std::vector<torch::Tensor> in{t};
        std::vector<std::vector<torch::Tensor>> parts(1);
        for (int r = 0; r < tp_.size(); ++r) parts[0].push_back(torch::empty_like(t));
        wait(tp_.group->allgather(parts, in));
        t = torch::cat(parts[0], f.layout.dim).contiguous();
        if (f.layout.qkv) t = regroup_qkv(t, tp_.size(), true);
      }
    } else {
      t = torch::empty(f.shape, dtype_);
    }
    if (mesh_->size("pp") > 1) {
      std::vector<torch::Tensor> v{t};
      c10d::BroadcastOptions options;
      options.rootRank = f.owner;
      wait(mesh_->group("pp")->broadcast(v, options));
    }
    out.push_back(t);
  }
  return out;
}

std::vector<cohort::MeshParameter> MeshModel::mesh_parameters() {
  std::vector<cohort::MeshParameter> out;
  const auto add = [&](const Full& f, const torch::Tensor& local, bool copy) {
    cohort::MeshParameter p{f.name, f.shape, tp_layout(f.name).dim, pp_rank_, local, local, 0, copy};
    if (tp_layout(f.name).qkv) {  // [3·d, ...] as [3, d, ...]; this rank's [3, d/tp, ...] is a view of its rows
      p.shape.insert(p.shape.begin(), 3);
      p.shape[1] /= 3;
      std::vector<int64_t> piece = p.shape;
      piece[1] /= tp_.size();
      p.local = local.view(piece);
      p.tp_dim = 1;
    }
    out.push_back(std::move(p));
  };
  for (const Full& f : full_) {
    if (f.owner == pp_rank_) add(f, f.local, false);
    // The head's copy of the token embedding, on a last stage that does not hold the first.
    if (f.name == "embed.wte.weight" && f.owner != pp_rank_ && tied_.defined()) add(f, tied_, true);
  }
  return out;
}

std::pair<double, double> MeshModel::eval_sums(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches) {
  torch::NoGradGuard no_grad;
  auto& pp = *mesh_->group("pp");
  const int S = schedule_.stages();
  double sum = 0, tokens = 0;
  for (const auto& [ids, targets] : batches) {
    torch::Tensor x;
    for (int s = 0; s < S; ++s) {
      if (schedule_.rank_of(s) != pp_rank_) continue;
      if (s > 0 && schedule_.rank_of(s - 1) != pp_rank_) {
        const int64_t t = sp_ ? ids.size(1) / tp_.size() : ids.size(1);  // under sp, this rank's positions
        std::vector<torch::Tensor> in{torch::empty({ids.size(0), t, cfg_.dim}, dtype_)};
        wait(pp.recv(in, schedule_.rank_of(s - 1), 2));
        x = in[0];
      }
      x = stages_.at(s)->forward(s == 0 ? ids : x);
      if (s == S - 1) {
        const double l = tp_.size() > 1 ? cohort::tensor_parallel::vocab_parallel_cross_entropy(x, targets, tp_).sum().item<double>()
                                        : lm_loss(x, targets).item<double>() * static_cast<double>(targets.numel());
        if (tp_.rank() == 0) sum += l, tokens += static_cast<double>(targets.numel());
      } else if (schedule_.rank_of(s + 1) != pp_rank_) {
        std::vector<torch::Tensor> out{x.contiguous()};
        wait(pp.send(out, schedule_.rank_of(s + 1), 2));
      }
    }
  }
  return {sum, tokens};
}

}  // namespace gpt_mesh
