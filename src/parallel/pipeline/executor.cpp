// run_schedule(): one pass over a rank's action list. What a microbatch leaves between actions is
// kept per (stage, microbatch) and dropped as soon as the last action that needs it has run: the
// stage's input and output until its backward (or its W), a received tensor until its compute.
// The timeline (docs/monitoring.md#the-timeline-panel): each send and receive is a flight-recorder
// entry, so a comm span "send" / "recv" with the tensor's bytes, the microbatch as its index and
// "pipeline activation" / "pipeline gradient" as what it is for. A Gloo send tells its completion
// only to a wait, so the step's sends are waited for in order on a thread of its own (SendWaiter):
// a send's span ends when it completed, not when the step ends.
#include "parallel/pipeline/executor.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cohort/error.h"
#include "monitor/worker_monitor.h"
#include "runtime/agent_link/flight_op.h"

namespace cohort::pipeline {
namespace {

constexpr int kMaxDims = 7;
constexpr int kHeader = 5 + kMaxDims;  // stage, microbatch, gradient?, dtype, ndim, dims
using Key = std::pair<int, int>;       // stage, microbatch

const char* link_name(bool gradient) { return gradient ? "pipeline gradient" : "pipeline activation"; }

// Waits for posted sends, oldest first, on a thread started with the first one; marks each one's
// flight entry completed or failed as it ends. finish() waits for all of them (or, unwinding,
// aborts them) and returns the first failure.
class SendWaiter {
 public:
  struct Failure {
    std::string cause;
    int stage = -1, mb = -1;
  };
  ~SendWaiter() { finish(/*abort=*/true); }
  void add(WorkHandle work, uint64_t seq, int stage, int mb) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Pending{std::move(work), seq, stage, mb});
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    cv_.notify_one();
  }
  Failure finish(bool abort) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      if (abort) {
        aborting_ = true;
        if (current_) current_->abort();
        for (auto& p : queue_) p.work->abort();
      }
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    return failure_;
  }

 private:
  struct Pending {
    WorkHandle work;
    uint64_t seq;  // its flight entry; 0: none (a header)
    int stage, mb;
  };
  void loop() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || closed_; });
        if (queue_.empty()) return;
        p = std::move(queue_.front());
        queue_.pop_front();
        if (aborting_) p.work->abort();
        current_ = p.work;
      }
      bool ok = false;
      std::string cause = "aborted";
      try {
        ok = p.work->wait();
      } catch (const std::exception& e) {
        cause = e.what();
      }
      detail::flight_update(p.seq, ok ? detail::FlightState::completed : detail::FlightState::failed);
      std::lock_guard<std::mutex> lock(mu_);
      current_.reset();
      if (!ok && failure_.cause.empty()) failure_ = Failure{cause.substr(0, cause.find('\n')), p.stage, p.mb};
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  WorkHandle current_;
  bool closed_ = false, aborting_ = false;
  Failure failure_;
  std::thread thread_;
};

class Step {
 public:
  Step(const Schedule& s, int rank, std::map<int, torch::nn::Sequential>& stages, Backend& group, const StepData& data,
       const LossFn& loss)
      : s_(s), rank_(rank), stages_(stages), group_(group), data_(data), loss_(loss) {}

  double run() {
    for (const Action& a : s_.actions.at(rank_)) run(a);
    const SendWaiter::Failure failed = sends_.finish(/*abort=*/false);
    if (!failed.cause.empty())
      throw CommError(rank_, "pipeline: the send of " + where(failed.stage, failed.mb) +
                                 " failed; a peer may have died or hung (" + failed.cause + ")");
    return loss_sum_ / s_.microbatches;
  }

 private:
  std::string where(int stage, int mb) const {
    return "pipeline stage " + std::to_string(stage) + ", microbatch " + std::to_string(mb);
  }
  [[noreturn]] void bad(const std::string& what) const { throw ConfigError(rank_, what); }

  torch::nn::Sequential& stage(int s) {
    auto it = stages_.find(s);
    if (it == stages_.end()) bad(where(s, 0) + ": this rank holds no module for stage " + std::to_string(s));
    return it->second;
  }

  void wait(WorkHandle& work, const char* what, int stage, int mb) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      const std::string cause = e.what();
      throw CommError(rank_, std::string("pipeline: ") + what + (stage >= 0 ? " of " + where(stage, mb) : "") +
                                 " failed; a peer may have died or hung (" + cause.substr(0, cause.find('\n')) + ")");
    }
  }

  void send(const at::Tensor& tensor, bool gradient, int stage, int mb, int to) {
    at::Tensor t = tensor.detach().contiguous();
    if (t.dim() > kMaxDims) bad(where(stage, mb) + ": tensors of more than 7 dimensions cannot be sent");
    at::Tensor header = torch::zeros({kHeader}, torch::kLong);
    auto h = header.accessor<int64_t, 1>();
    h[0] = stage, h[1] = mb, h[2] = gradient, h[3] = static_cast<int64_t>(t.scalar_type()), h[4] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) h[5 + d] = t.size(d);
    // One entry (and span) per transfer, from the header's post to the tensor's completion.
    const uint64_t seq = detail::flight_record(detail::flight_op("send", link_name(gradient), mb, t));
    for (at::Tensor part : {header, t}) {
      std::vector<at::Tensor> tensors{part};
      WorkHandle work;
      try {
        work = group_.send(tensors, to, gradient ? 1 : 0);
      } catch (...) {
        detail::flight_update(seq, detail::FlightState::failed);
        throw;
      }
      kept_.push_back(part);  // alive until its send completes
      sends_.add(std::move(work), part.is_same(t) ? seq : 0, stage, mb);
    }
  }

  at::Tensor receive(bool gradient, int stage, int mb, int from, int sender_stage) {
    // The span covers the wait for the header too (the stage idles there); its size once known.
    detail::FlightScope entry(detail::flight_op("recv", link_name(gradient), mb, torch::zeros({0})));
    std::vector<at::Tensor> header{torch::zeros({kHeader}, torch::kLong)};
    auto work = group_.recv(header, from, gradient ? 1 : 0);
    wait(work, gradient ? "the receive of the gradient" : "the receive of the activation", stage, mb);
    auto h = header[0].accessor<int64_t, 1>();
    if (h[0] != sender_stage || h[1] != mb || h[2] != gradient || h[4] < 0 || h[4] > kMaxDims)
      bad("pipeline: expected the " + std::string(gradient ? "gradient" : "activation") + " of stage " +
          std::to_string(sender_stage) + ", microbatch " + std::to_string(mb) + " from rank " + std::to_string(from) +
          " but received stage " + std::to_string(h[0]) + ", microbatch " + std::to_string(h[1]) +
          ": the ranks run different schedules or microbatch counts");
    std::vector<int64_t> shape(h[4]);
    for (int64_t d = 0; d < h[4]; ++d) shape[d] = h[5 + d];
    std::vector<at::Tensor> t{torch::empty(shape, torch::TensorOptions().dtype(static_cast<at::ScalarType>(h[3])))};
    detail::flight_recorder().set_size(entry.seq(), c10::toString(t[0].scalar_type()), t[0].numel(),
                                       static_cast<int64_t>(t[0].nbytes()));
    work = group_.recv(t, from, gradient ? 1 : 0);
    wait(work, gradient ? "the receive of the gradient" : "the receive of the activation", stage, mb);
    entry.done();
    return t[0];
  }

  // The stage's input for a forward: the data, the previous stage's output on this rank, or received.
  at::Tensor input_of(int st, int mb) {
    if (st == 0) {
      if (mb >= static_cast<int>(data_.inputs.size())) bad(where(st, mb) + ": no input for this microbatch");
      return data_.inputs[mb];
    }
    at::Tensor in = take(s_.rank_of(st - 1) == rank_ ? local_out_ : received_, {st, mb}, "its input");
    return in.detach().requires_grad_(true);
  }
  // The gradient of the stage's output for a backward: none for the last stage (its loss), else from
  // the next stage on this rank or received.
  at::Tensor grad_of(int st, int mb) {
    if (st == s_.stages() - 1) return {};
    return take(s_.rank_of(st + 1) == rank_ ? local_grad_ : received_grad_, {st, mb}, "its output's gradient");
  }
  at::Tensor take(std::map<Key, at::Tensor>& from, Key k, const char* what) {
    auto it = from.find(k);
    if (it == from.end()) bad(where(k.first, k.second) + ": " + what + " is not there (the schedule is broken)");
    at::Tensor t = std::move(it->second);
    from.erase(it);
    return t;
  }

  void forward(int st, int mb) {
    at::Tensor in = input_of(st, mb);
    at::Tensor out = stage(st)->forward(in);
    if (st == s_.stages() - 1) {
      if (mb >= static_cast<int>(data_.targets.size())) bad(where(st, mb) + ": no target for this microbatch");
      const at::Tensor l = loss_(out, data_.targets[mb]);
      loss_sum_ += l.item<double>();
      out = l / s_.microbatches;
    } else if (s_.rank_of(st + 1) == rank_) {
      local_out_[{st + 1, mb}] = out;
    }
    saved_[{st, mb}] = {in, out};
  }

  // BW: both gradients at once. B: the input's only, keeping the graph for W.
  void backward(int st, int mb, bool split) {
    auto it = saved_.find({st, mb});
    if (it == saved_.end()) bad(where(st, mb) + ": backward before forward (the schedule is broken)");
    at::Tensor grad = grad_of(st, mb);
    const at::Tensor in = it->second.first, out = it->second.second;
    at::Tensor input_grad;
    if (!split) {
      torch::autograd::backward({out}, {grad});
      if (st > 0) input_grad = in.grad();
      saved_.erase(it);
    } else {
      if (st > 0) input_grad = torch::autograd::grad({out}, {in}, {grad}, /*retain_graph=*/true)[0];
      weight_grad_[{st, mb}] = grad;
    }
    if (st == 0) return;
    if (s_.rank_of(st - 1) == rank_) local_grad_[{st - 1, mb}] = input_grad;
    else input_grads_[{st, mb}] = input_grad;
  }

  void weight(int st, int mb) {
    auto it = saved_.find({st, mb});
    if (it == saved_.end()) bad(where(st, mb) + ": W before its B (the schedule is broken)");
    at::Tensor grad = take(weight_grad_, {st, mb}, "B's output gradient");
    const auto params = stage(st)->parameters();
    torch::autograd::backward({it->second.second}, {grad}, /*retain_graph=*/false, false, params);
    saved_.erase(it);
  }

  void run(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    switch (a.kind) {
      case ActionKind::forward: forward(st, mb); break;
      case ActionKind::full_backward: backward(st, mb, false); break;
      case ActionKind::input_grad: backward(st, mb, true); break;
      case ActionKind::weight_grad: weight(st, mb); break;
      case ActionKind::send_activation: {
        auto it = saved_.find({st, mb});
        if (it == saved_.end()) bad(where(st, mb) + ": send before forward (the schedule is broken)");
        send(it->second.second, false, st, mb, s_.rank_of(st + 1));
        break;
      }
      case ActionKind::send_gradient: send(take(input_grads_, {st, mb}, "its input's gradient"), true, st, mb, s_.rank_of(st - 1)); break;
      case ActionKind::recv_activation: received_[{st, mb}] = receive(false, st, mb, s_.rank_of(st - 1), st - 1); break;
      case ActionKind::recv_gradient: received_grad_[{st, mb}] = receive(true, st, mb, s_.rank_of(st + 1), st + 1); break;
    }
  }

  const Schedule& s_;
  const int rank_;
  std::map<int, torch::nn::Sequential>& stages_;
  Backend& group_;
  const StepData& data_;
  const LossFn& loss_;
  double loss_sum_ = 0;
  std::map<Key, std::pair<at::Tensor, at::Tensor>> saved_;  // input, output (the loss / m on the last stage)
  std::map<Key, at::Tensor> local_out_, received_;           // inputs waiting for their forward
  std::map<Key, at::Tensor> local_grad_, received_grad_;     // output gradients waiting for their backward
  std::map<Key, at::Tensor> input_grads_;                    // input gradients waiting for their send
  std::map<Key, at::Tensor> weight_grad_;                    // output gradients kept from B for W
  std::vector<at::Tensor> kept_;
  SendWaiter sends_;  // last: joined (sends aborted when unwinding) before the tensors above go
};

}  // namespace

double run_schedule(const Schedule& schedule, int rank, std::map<int, torch::nn::Sequential>& stages, Backend& group,
                    const StepData& data, const LossFn& loss) {
  if (rank < 0 || rank >= schedule.ranks)
    throw ConfigError(rank, "pipeline: rank " + std::to_string(rank) + " is not one of the schedule's " +
                                std::to_string(schedule.ranks) + " pipeline ranks");
  if (group.getSize() != schedule.ranks)
    throw ConfigError(rank, "pipeline: the group has " + std::to_string(group.getSize()) + " ranks, the schedule " +
                                std::to_string(schedule.ranks));
  // The transfers' spans belong to the monitor of the thread that runs the step (as DDP's marks do).
  if (detail::StepMonitor& monitor = detail::current_step_monitor(); monitor.enabled()) detail::set_span_owner(&monitor);
  return Step(schedule, rank, stages, group, data, loss).run();
}

}  // namespace cohort::pipeline
