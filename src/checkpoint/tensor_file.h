// Named torch tensors to and from safetensors files (format in safetensors.h), through the atomic
// writer. Internal header.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/file_io.h"
#include "checkpoint/safetensors.h"

namespace cohort::ckpt {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// safetensors dtype name of a torch dtype; throws CheckpointError for one safetensors lacks.
std::string safetensors_dtype(c10::ScalarType type, int rank);
c10::ScalarType torch_dtype(const std::string& dtype);

/// Writes CPU, contiguous tensors (the caller's snapshot) as dir/name, atomically.
FileRecord write_tensor_file(const std::string& dir, const std::string& name, const NamedTensors& tensors, int rank);

/// A safetensors file read into memory, its tensors as views of that memory (valid while the
/// LoadedFile lives). Construction reads, hashes and checks the file against its manifest entry.
class LoadedFile {
 public:
  LoadedFile(const std::string& dir, const struct ManifestFile& expected, int rank);
  const std::map<std::string, at::Tensor>& tensors() const { return tensors_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  FileContents contents_;
  std::map<std::string, at::Tensor> tensors_;
};

}  // namespace cohort::ckpt
