// Named torch tensors to and from safetensors files (format in safetensors.h): written through the
// atomic writer, read back tensor by tensor into their destinations. Internal header.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/storage/file_io.h"
#include "checkpoint/format/safetensors.h"

namespace cohort::ckpt {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// safetensors dtype name of a torch dtype; throws CheckpointError for one safetensors lacks.
std::string safetensors_dtype(c10::ScalarType type, int rank);
c10::ScalarType torch_dtype(const std::string& dtype);

/// What a tensor file of `tensors` holds before their bytes (safetensors' length and JSON header;
/// the bytes follow back to back in that order), and in `file_bytes` the file's size: for a writer
/// that copies the bytes itself (mapped_files.h). Only dtypes and shapes are read.
std::string tensor_file_header(const NamedTensors& tensors, int rank, uint64_t* file_bytes);

/// Writes CPU, contiguous tensors (the caller's snapshot) as dir/name, atomically. `allow_direct`
/// false keeps to the page cache (AtomicWriter): for tmpfs, where the page cache is the storage.
/// `reuse`: a retired file to overwrite in place (AtomicWriter's).
FileRecord write_tensor_file(const std::string& dir, const std::string& name, const NamedTensors& tensors, int rank,
                             bool allow_direct = true, const std::string& reuse = "");

/// A committed safetensors file, verified against its manifest entry at construction (one pass
/// through a small buffer that checks its size and XXH3-64, parses its header and hashes each
/// tensor's bytes) and then read tensor by tensor straight into where each goes, every read
/// checked against its tensor's hash (so bytes that changed on disk after the verification are
/// never applied silently). The whole file is never copied into fresh memory: on the build
/// machine page-faulting that memory cost 5-8x the read itself (docs/BENCHMARKS.md, checkpoints).
class TensorFileReader {
 public:
  TensorFileReader(const std::string& dir, const struct ManifestFile& expected, int rank);
  ~TensorFileReader();
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;

  const std::string& name() const { return name_; }
  /// The file's tensors (name, dtype, shape, byte range), in data order.
  const std::vector<TensorEntry>& entries() const { return header_.tensors; }
  /// The entry named `tensor`, or null.
  const TensorEntry* find(const std::string& tensor) const;
  /// Reads the entry into `dst`, which has its number of elements (CPU and contiguous of the same
  /// dtype: straight in; anything else through a temporary and copy_). Throws CheckpointError.
  void read_into(const TensorEntry& e, const at::Tensor& dst) const;
  /// The entry as a new CPU tensor.
  at::Tensor read(const TensorEntry& e) const;

 private:
  void verify(const struct ManifestFile& expected);
  void pread_all(char* out, uint64_t bytes, uint64_t offset) const;
  void read_verified(const TensorEntry& e, char* out) const;
  std::string name_, path_;
  int rank_;
  int fd_ = -1;
  SafetensorsHeader header_;
  std::vector<uint64_t> tensor_xxh3_;  // per entry, from the verifying pass
};

}  // namespace cohort::ckpt
