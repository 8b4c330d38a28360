// cohort::DeviceMesh (issue 47): coordinates are arithmetic on the sizes; the slices' groups are
// Gloo subgroups over the job's store (runtime's make_cpu_subgroup), each under a prefix made of
// the mesh's number in the job, the dimension and the slice's first rank, so that every slice of
// every mesh meets its own members only. Groups are made dimension by dimension, in the order the
// dimensions are given: every rank reaches dimension d's group after the same earlier ones, so the
// members of a slice are never waiting in different dimensions (no deadlock while connecting).
#include "cohort/device_mesh.h"

#include <algorithm>
#include <set>

#include "cohort/error.h"
#include "runtime/context_internals.h"

namespace cohort {

struct DeviceMesh::Impl {
  std::shared_ptr<Context> ctx;
  std::vector<MeshDim> dims;
  int64_t sequence = 0;
  std::vector<c10::intrusive_ptr<Backend>> groups;  // one per dimension: this rank's slice
  int64_t rejoin_listener = -1;

  int world() const { return ctx->world_size(); }
  std::string shape() const {
    std::string out;
    for (const auto& d : dims) out += (out.empty() ? "" : " x ") + d.name + "=" + std::to_string(d.size);
    return out;
  }
  size_t index(const std::string& name) const {
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i].name == name) return i;
    std::string names;
    for (const auto& d : dims) names += (names.empty() ? "" : ", ") + d.name;
    throw ConfigError(ctx->rank(), "the device mesh has no dimension '" + name + "' (it has " + names + ")");
  }
  // Row-major: the last dimension's coordinate varies fastest.
  std::vector<int> coordinates(int rank) const {
    if (rank < 0 || rank >= world())
      throw ConfigError(ctx->rank(), "device mesh: rank " + std::to_string(rank) + " is outside the world of " +
                                         std::to_string(world()));
    std::vector<int> out(dims.size());
    for (size_t i = dims.size(); i-- > 0;) {
      out[i] = rank % dims[i].size;
      rank /= dims[i].size;
    }
    return out;
  }
  int rank_at(const std::vector<int>& c) const {
    if (c.size() != dims.size())
      throw ConfigError(ctx->rank(), "device mesh " + shape() + ": " + std::to_string(c.size()) + " coordinates for " +
                                         std::to_string(dims.size()) + " dimensions");
    int rank = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (c[i] < 0 || c[i] >= dims[i].size)
        throw ConfigError(ctx->rank(), "device mesh " + shape() + ": coordinate " + std::to_string(c[i]) + " of " +
                                           dims[i].name + " is outside 0.." + std::to_string(dims[i].size - 1));
      rank = rank * dims[i].size + c[i];
    }
    return rank;
  }
  std::vector<int> slice(size_t dim) const {
    std::vector<int> c = coordinates(ctx->rank());
    std::vector<int> out;
    for (int k = 0; k < dims[dim].size; ++k) {
      c[dim] = k;
      out.push_back(rank_at(c));
    }
    return out;
  }
  void connect() {
    groups.clear();
    const std::vector<int> mine = coordinates(ctx->rank());
    for (size_t d = 0; d < dims.size(); ++d) {
      const std::string prefix = "cohort/mesh/" + std::to_string(sequence) + "/" + dims[d].name + "/" +
                                 std::to_string(slice(d).front()) + "/";
      groups.push_back(detail::make_cpu_subgroup(*ctx, prefix, mine[d], dims[d].size));
    }
  }
};

DeviceMesh::DeviceMesh(std::shared_ptr<Context> ctx, std::vector<MeshDim> dims) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ctx = std::move(ctx);
  m.dims = std::move(dims);
  const int rank = m.ctx->rank();
  if (m.dims.empty()) throw ConfigError(rank, "device mesh: no dimensions (give at least one, e.g. {\"dp\", world size})");
  std::set<std::string> names;
  long long product = 1;
  for (const auto& d : m.dims) {
    if (d.size < 1) throw ConfigError(rank, "device mesh " + m.shape() + ": dimension " + d.name + " has size " +
                                                std::to_string(d.size) + " (at least 1)");
    if (!names.insert(d.name).second)
      throw ConfigError(rank, "device mesh " + m.shape() + ": two dimensions are named '" + d.name + "'");
    product *= d.size;
  }
  if (product != m.world())
    throw ConfigError(rank, "device mesh " + m.shape() + " has " + std::to_string(product) + " ranks, but the world has " +
                                std::to_string(m.world()) + ": the sizes' product must be the world size");
  m.sequence = detail::ContextInternals::next_sequence(*m.ctx);
  m.connect();
  // After a peer's replacement re-forms the job's groups (Context::rejoin), the slices reconnect
  // under the new generation's store, as the replacement's new mesh connects them.
  m.rejoin_listener = detail::ContextInternals::add_rejoin_listener(
      *m.ctx, "DeviceMesh", [impl = impl_.get()] { impl->groups.clear(); }, [impl = impl_.get()] { impl->connect(); });
}

DeviceMesh::~DeviceMesh() {
  if (impl_ && impl_->rejoin_listener >= 0) detail::ContextInternals::remove_rejoin_listener(*impl_->ctx, impl_->rejoin_listener);
}

DeviceMesh::DeviceMesh(DeviceMesh&&) noexcept = default;

const std::vector<MeshDim>& DeviceMesh::dims() const { return impl_->dims; }
int DeviceMesh::size(const std::string& dim) const { return impl_->dims[impl_->index(dim)].size; }
int DeviceMesh::rank() const { return impl_->ctx->rank(); }
std::vector<int> DeviceMesh::coordinates() const { return impl_->coordinates(rank()); }
std::vector<int> DeviceMesh::coordinates(int rank) const { return impl_->coordinates(rank); }
int DeviceMesh::coordinate(const std::string& dim) const { return coordinates()[impl_->index(dim)]; }
int DeviceMesh::rank_at(const std::vector<int>& coordinates) const { return impl_->rank_at(coordinates); }
std::vector<int> DeviceMesh::slice_ranks(const std::string& dim) const { return impl_->slice(impl_->index(dim)); }
const c10::intrusive_ptr<Backend>& DeviceMesh::group(const std::string& dim) const {
  return impl_->groups.at(impl_->index(dim));
}

}  // namespace cohort
