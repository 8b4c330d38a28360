// The safetensors layout (https://github.com/huggingface/safetensors), so that Python tools read
// cohort's weights with `safetensors.safe_open` or 20 lines of `json` + `struct`:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded to a multiple of 8][data]
//   header = {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<string>"}}
//
// Offsets are relative to the start of the data; tensors are stored back to back in the order
// given, little-endian, C-contiguous. This file only builds and checks headers; it knows nothing of
// torch (the CLI's `ckpt verify` and `inspect` use it without libtorch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cohort::ckpt {

struct TensorEntry {
  std::string name;
  std::string dtype;  // F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
  uint64_t data_bytes = 0;  // sum of the tensors' sizes
};

/// Bytes per element of a safetensors dtype; 0 for one this file does not know.
int dtype_size(const std::string& dtype);

/// Lays out `tensors` (name, dtype, shape; begin/end are filled in) and returns the header bytes
/// to write before the data, length prefix included.
std::string build_header(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata);

/// Parses the header at the start of a file of `file_bytes` bytes (`prefix` holds at least the
/// first min(file_bytes, 8 + N) bytes, or fewer: then needed_prefix() says how many to read).
/// Throws std::runtime_error with the reason: a header that is not JSON, offsets out of the
/// file, a shape that does not match its byte range, overlapping tensors, an unknown dtype.
SafetensorsHeader parse_header(const std::string& prefix, uint64_t file_bytes);

/// How many bytes of the file parse_header needs (reads the length prefix; 8 if too short).
uint64_t needed_prefix(const std::string& first_bytes);

/// Header of a file on disk, checked against its size. Throws std::runtime_error.
SafetensorsHeader read_header(const std::string& path);

}  // namespace cohort::ckpt
