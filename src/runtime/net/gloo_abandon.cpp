// Failing a Gloo process group's connections. See gloo_abandon.h.
#include "runtime/net/gloo_abandon.h"

#ifdef COHORT_WITH_GLOO
#include <gloo/context.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace cohort::detail {

#ifdef COHORT_WITH_GLOO
namespace {
// ProcessGroupGloo keeps its Gloo contexts protected; a derived class may name the member.
struct GlooContexts : c10d::ProcessGroupGloo {
  static constexpr auto member = &GlooContexts::contexts_;
};
}  // namespace

void abandon_gloo_group(Backend& group) {
  auto* gloo = dynamic_cast<c10d::ProcessGroupGloo*>(&group);
  if (gloo == nullptr) return;
  for (const auto& context : gloo->*GlooContexts::member) {
    if (!context) continue;
    for (int peer = 0; peer < gloo->getSize(); ++peer) {
      if (peer == gloo->getRank()) continue;
      // Closed with a reset (SO_LINGER 0): the peer's operations on it fail at once.
      if (auto& pair = context->getPair(peer)) pair->close();
    }
  }
}
#else
void abandon_gloo_group(Backend&) {}
#endif

}  // namespace cohort::detail
