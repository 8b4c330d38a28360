// Fuzzes parse_header (a safetensors file's length prefix and JSON header) at the file size the
// input claims: a header or a std::runtime_error, never a crash. What it accepts must fit the file:
// every tensor's byte range inside the data section.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "checkpoint/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The file as long as the input, and as one that claims more data after it.
  for (uint64_t file_bytes : {static_cast<uint64_t>(size), static_cast<uint64_t>(size) + (1u << 20)}) {
    try {
      const auto header = cohort::ckpt::parse_header(bytes, file_bytes);
      for (const auto& t : header.tensors) {
        if (t.end < t.begin || header.data_start + t.end > file_bytes) std::abort();
      }
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
