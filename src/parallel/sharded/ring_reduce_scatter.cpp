#include "ring_reduce_scatter.h"

#include <torch/torch.h>

#include <vector>

namespace cohort::detail {

void ring_reduce_scatter(Backend& group, int rank, int world, at::Tensor& flat, uint32_t tag) {
  if (world == 1) return;
  torch::NoGradGuard no_grad;
  const int64_t chunk = flat.numel() / world;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  auto part = [&](int index) { return flat.narrow(0, ((index % world) + world) % world * chunk, chunk); };
  at::Tensor incoming = at::empty({chunk}, flat.options());
  for (int s = 0; s < world - 1; ++s) {
    std::vector<at::Tensor> out{part(rank - 1 - s)}, in{incoming};
    // Tags keep the steps apart (a fast rank's next step must not match a slow one's).
    auto sent = group.send(out, next, static_cast<int>((tag % (1u << 24)) * 64 + s));
    auto received = group.recv(in, prev, static_cast<int>((tag % (1u << 24)) * 64 + s));
    received->wait();
    part(rank - 2 - s).add_(incoming);
    sent->wait();
  }
}

}  // namespace cohort::detail
