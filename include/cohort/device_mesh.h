// cohort/device_mesh.h — the job's ranks as a grid of named dimensions (issue 47), e.g.
// {{"pp", 2}, {"dp", 2}, {"tp", 2}} over 8 ranks, with one process group per slice along each
// dimension, made once when the mesh is built.
//
// Layout: row-major, the last dimension innermost: a rank's number is its coordinates read as a
// mixed-radix number, so with tp last the tp peers are consecutive ranks — the same machine when a
// machine's ranks are numbered together, as `cohort run` and torchrun number them. A slice along a
// dimension is the ranks that differ only in that dimension's coordinate; a rank's place in its
// slice's group is its coordinate there.
// Not here: NCCL groups (the slices' groups are Gloo groups for CPU tensors), tensor- or
// pipeline-parallel layers, which take these groups.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/context.h"

namespace cohort {

/// One dimension of a DeviceMesh: its name (unique in the mesh) and how many ranks it spans.
struct MeshDim {
  /// The dimension's name, e.g. "pp", "dp" or "tp".
  std::string name;
  /// How many ranks a slice along this dimension holds (at least 1).
  int size = 1;
};

/// The job's ranks laid out as a grid of named dimensions, with a process group for this rank's
/// slice along each dimension. Every rank builds the mesh with the same dimensions, in the same
/// order relative to the other cohort objects it builds on the Context (collective).
class DeviceMesh {
 public:
  /// Lays the ranks of `ctx` out over `dims` (the last innermost) and connects this rank's slice
  /// group along each dimension, first dimension first. Throws ConfigError — one line naming the
  /// rank, the sizes and the world — when the sizes' product is not the world size, a size is below
  /// 1, or two dimensions share a name; CommError when a slice's group does not connect.
  DeviceMesh(std::shared_ptr<Context> ctx, std::vector<MeshDim> dims);
  /// Lets go of the slices' groups.
  ~DeviceMesh();
  /// Moves the mesh; its groups stay connected.
  DeviceMesh(DeviceMesh&&) noexcept;
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  /// The dimensions, outermost first, as given to the constructor.
  const std::vector<MeshDim>& dims() const;
  /// The size of dimension `dim`. Throws ConfigError for a name the mesh does not have.
  int size(const std::string& dim) const;
  /// This rank's global rank.
  int rank() const;
  /// This rank's coordinates, one per dimension, outermost first.
  std::vector<int> coordinates() const;
  /// The coordinates of global rank `rank` (0 to world - 1; ConfigError otherwise).
  std::vector<int> coordinates(int rank) const;
  /// This rank's coordinate along `dim`: its place in that dimension's slice and group.
  int coordinate(const std::string& dim) const;
  /// The global rank at `coordinates` (one per dimension, each within its size; ConfigError otherwise).
  int rank_at(const std::vector<int>& coordinates) const;
  /// The global ranks of this rank's slice along `dim`, by their coordinate there (this rank's
  /// group along `dim` numbers them 0, 1, ... in this order).
  std::vector<int> slice_ranks(const std::string& dim) const;
  /// The process group of this rank's slice along `dim` (Gloo, CPU tensors); its rank is
  /// coordinate(dim) and its size size(dim). The mesh owns it; after the Context rejoins, the mesh
  /// holds a new group, so fetch it again rather than keep the pointer.
  const c10::intrusive_ptr<Backend>& group(const std::string& dim) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
