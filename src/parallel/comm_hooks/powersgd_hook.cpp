// PyTorch's powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py) in C++,
// step for step, so that the two compress alike (cohort/comm_hook.h):
//   steps < start_step: divide by W, allreduce (the default hook);
//   then, per bucket: add last step's error (error feedback) and keep a copy; split the gradients
//   into matrices worth compressing (n x m, (n + m) r · rate < n m) and the rest; allreduce the
//   rest, divided by W; Q (m x r) from last step (warm start: orthogonalised again) or random
//   (seeded, the same on every rank); P = M Q, allreduce P, orthogonalise P; Q = M^T P,
//   allreduce Q, divide by W; M ≈ P Q^T; the error is the copy minus the result over the whole
//   bucket (PyTorch's semantics, uncompressed part included: there it averages to zero).
// Checkpoints keep the hook's state per rank (state()/load_state(): step count, seeds, and per
// bucket the error, P and Q); a bucket whose saved tensors no longer fit (other bucket sizes)
// starts afresh, with a warning.
// Orthogonalisation is Gram–Schmidt (PyTorch's for r ≤ 2 and for 16-bit types; it uses QR above:
// the same span, so the same P Q^T up to rounding). A zero column stays zero instead of NaN.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>  // the state's text

#include <map>
#include <random>
#include <sstream>

#include "cohort/comm_hook.h"
#include "cohort/error.h"
#include "runtime/json_fields.h"
#include "runtime/log.h"

namespace cohort {
namespace {

void orthogonalize(at::Tensor m) {
  const int64_t r = m.size(1);
  for (int64_t i = 0; i < r; ++i) {
    auto col = m.narrow(1, i, 1);
    col.div_(col.norm().clamp_min(std::numeric_limits<float>::min()));
    if (i + 1 < r) {
      auto rest = m.narrow(1, i + 1, r - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

// The saved tensor for bucket k where it has `numel` elements, moved to `like`'s device; else
// undefined (and forgotten, with a warning: the bucket starts afresh).
at::Tensor fitting(std::map<int, at::Tensor>& saved, int k, int64_t numel, const at::Tensor& like, const char* what) {
  auto it = saved.find(k);
  if (it == saved.end()) return {};
  if (it->second.numel() != numel) {
    detail::log_warn(std::string("PowerSGD: the restored ") + what + " of bucket " + std::to_string(k) +
                     " does not fit it (other bucket sizes?): the bucket starts afresh");
    saved.erase(it);
    return {};
  }
  if (it->second.device() != like.device() || it->second.scalar_type() != like.scalar_type())
    it->second = it->second.to(like.options());
  return it->second;
}

struct Matrix {
  at::Tensor m;  // a view of the bucket's buffer, n x m
  int64_t r = 0;
};

class PowerSGDHook final : public CommHook {
 public:
  explicit PowerSGDHook(PowerSGDOptions o) : o_(o), seeds_(o.seed) {}

  std::string describe() const override {
    std::ostringstream os;
    os << "powersgd(rank=" << o_.rank << ", start_step=" << o_.start_step
       << ", min_compression_rate=" << o_.min_compression_rate << ", error_feedback=" << o_.error_feedback
       << ", warm_start=" << o_.warm_start << ", seed=" << o_.seed << ")";
    return os.str();
  }

  void check(const std::vector<GradBucket>& buckets, int rank) const override {
    if (o_.rank < 1) {
      throw ConfigError(rank, "PowerSGD rank must be at least 1 (got " + std::to_string(o_.rank) + ")");
    }
    if (o_.start_step < 0 || !(o_.min_compression_rate > 0)) {
      throw ConfigError(rank, "PowerSGD start_step must be >= 0 and min_compression_rate > 0");
    }
    for (const auto& b : buckets) {
      if (!at::isFloatingType(b.buffer.scalar_type())) {
        throw ConfigError(rank, "DDP comm hook 'powersgd' cannot compress bucket " + std::to_string(b.index) + " (" +
                                    b.names.front() + ", ...): its gradients are " +
                                    c10::toString(b.buffer.scalar_type()) + ", not floating point");
      }
      for (size_t k = 0; k < b.gradients.size(); ++k) {
        const auto& g = b.gradients[k];
        if (g.dim() < 2) continue;  // allreduced as it is
        const int64_t n = g.size(0), m = g.numel() / std::max<int64_t>(n, 1);
        if (o_.rank > std::min(n, m)) {
          throw ConfigError(rank, "PowerSGD rank " + std::to_string(o_.rank) + " is larger than parameter '" +
                                      b.names[k] + "' (bucket " + std::to_string(b.index) + ", a " +
                                      std::to_string(n) + " x " + std::to_string(m) + " matrix) allows: at most " +
                                      std::to_string(std::min(n, m)));
        }
      }
    }
  }

  at::Tensor run(GradBucket& bucket, HookComm& comm) override {
    torch::NoGradGuard no_grad;
    at::Tensor& input = bucket.buffer;
    const int w = comm.world_size();
    if (step_ < o_.start_step) {
      input.div_(w);
      comm.allreduce_sum(input);
      if (bucket.is_last) ++step_;
      return input;
    }
    const int k = bucket.index;
    at::Tensor copy;
    if (o_.error_feedback) {
      if (at::Tensor error = fitting(errors_, k, input.numel(), input, "error feedback"); error.defined())
        input.add_(error);
      copy = input.clone();
    }
    // Step I: which gradients to compress.
    std::vector<Matrix> compress;
    std::vector<at::Tensor> plain;
    int64_t p_size = 0, q_size = 0;
    for (const auto& g : bucket.gradients) {
      if (g.dim() >= 1) {
        auto matrix = g.view({g.size(0), -1});
        const int64_t n = matrix.size(0), m = matrix.size(1);
        const int64_t r = std::min<int64_t>({n, m, o_.rank});
        if (static_cast<double>((n + m) * r) * o_.min_compression_rate < static_cast<double>(n * m)) {
          compress.push_back({matrix, r});
          p_size += n * r;
          q_size += m * r;
          continue;
        }
      }
      plain.push_back(g);
    }
    // Step II: the rest, allreduced as it is (sum, then divide, as PyTorch does).
    if (!plain.empty()) {
      std::vector<at::Tensor> flat;
      for (const auto& t : plain) flat.push_back(t.reshape({-1}));
      at::Tensor rest = at::cat(flat);
      comm.allreduce_sum(rest);
      rest.div_(w);
      int64_t offset = 0;
      for (auto& t : plain) {
        t.copy_(rest.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
    // Step III: P and Q, warm-started where they exist.
    const bool fresh = !o_.warm_start || !fitting(p_, k, p_size, input, "P").defined() ||
                       !fitting(q_, k, q_size, input, "Q").defined();
    if (fresh) {
      p_[k] = at::empty({p_size}, input.options());
      q_[k] = at::empty({q_size}, input.options());
    }
    std::vector<at::Tensor> ps, qs;
    for (int64_t pi = 0, qi = 0, i = 0; i < static_cast<int64_t>(compress.size()); ++i) {
      const auto& c = compress[i];
      ps.push_back(p_[k].narrow(0, pi, c.m.size(0) * c.r).view({c.m.size(0), c.r}));
      qs.push_back(q_[k].narrow(0, qi, c.m.size(1) * c.r).view({c.m.size(1), c.r}));
      pi += c.m.size(0) * c.r;
      qi += c.m.size(1) * c.r;
    }
    if (fresh) {
      // A generator of its own: the user's global RNG (and so the run's reproducibility) is untouched.
      auto gen = at::detail::createCPUGenerator(seeds_() % 1000000000);
      for (auto& q : qs) q.copy_(at::randn(q.sizes(), gen, at::TensorOptions().dtype(input.scalar_type())));
    }
    for (auto& q : qs) orthogonalize(q);
    for (size_t i = 0; i < compress.size(); ++i) at::matmul_out(ps[i], compress[i].m, qs[i]);
    if (p_size > 0) comm.allreduce_sum(p_[k]);  // not divided: orthogonalised next
    for (auto& p : ps) orthogonalize(p);
    for (size_t i = 0; i < compress.size(); ++i) at::matmul_out(qs[i], compress[i].m.t(), ps[i]);
    if (q_size > 0) {
      comm.allreduce_sum(q_[k]);
      q_[k].div_(w);
    }
    for (size_t i = 0; i < compress.size(); ++i) at::matmul_out(compress[i].m, ps[i], qs[i].t());
    if (o_.error_feedback) errors_[k] = copy - input;
    if (!o_.warm_start) {
      p_.clear();
      q_.clear();
    }
    if (bucket.is_last) ++step_;
    return input;
  }

  RankState state() const override {
    std::ostringstream seeds;
    seeds << seeds_;
    RankState s;
    s.text = nlohmann::json{{"hook", describe()}, {"step", step_}, {"seeds", seeds.str()}}.dump();
    for (const auto& [prefix, tensors] : {std::pair{"error/", &errors_}, {"p/", &p_}, {"q/", &q_}})
      for (const auto& [k, t] : *tensors) s.tensors.emplace_back(prefix + std::to_string(k), t);
    return s;
  }

  void load_state(const RankState& saved, bool same_world) override {
    if (saved.empty()) {
      detail::log(detail::LogLevel::info, "PowerSGD: the checkpoint holds no state of this hook: it starts again "
                                          "(plain allreduce for " + std::to_string(o_.start_step) + " steps)");
      return;
    }
    const auto j = detail::parse_capped(saved.text);  // a parse error: the restore fails, naming the hook
    if (j.at("hook").get<std::string>() != describe()) {
      detail::log_warn("PowerSGD: the checkpoint holds the state of " + j.at("hook").get<std::string>() +
                       ", not of this " + describe() + ": it starts again");
      return;
    }
    std::mt19937_64 seeds;
    std::istringstream in(j.at("seeds").get<std::string>());
    in >> seeds;
    if (!in) throw std::runtime_error("its seeds do not parse");
    std::map<int, at::Tensor> errors, p, q;
    for (const auto& [name, t] : saved.tensors) {
      const auto slash = name.find('/');
      const std::string kind = name.substr(0, slash);
      const int k = std::stoi(name.substr(slash + 1));
      if (kind == "error") {
        if (same_world) errors[k] = t;  // each rank's own residual: meaningless in another split
      } else if (kind == "p") {
        p[k] = t;
      } else if (kind == "q") {
        q[k] = t;
      } else {
        throw std::runtime_error("it holds an unknown tensor \"" + name + "\"");
      }
    }
    step_ = j.at("step").get<int64_t>();
    seeds_ = seeds;
    errors_ = std::move(errors);
    p_ = std::move(p);
    q_ = std::move(q);
  }

 private:
  PowerSGDOptions o_;
  int64_t step_ = 0;
  std::mt19937_64 seeds_;
  std::map<int, at::Tensor> errors_, p_, q_;
};

}  // namespace

std::shared_ptr<CommHook> powersgd_hook(PowerSGDOptions options) { return std::make_shared<PowerSGDHook>(options); }

}  // namespace cohort
