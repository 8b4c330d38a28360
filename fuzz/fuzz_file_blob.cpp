// Fuzzes the parser of the blobs in which snapshot files travel between machines
// (checkpoint/snapshots/file_blob.h): any bytes are files or a problem, never an exception or a
// crash; the files of a blob it accepts, packed again, give a blob with the same files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/snapshots/file_blob.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::ckpt;
  const UnpackedFiles got = unpack_files(reinterpret_cast<const char*>(data), size);
  if (!got.problem.empty()) {
    if (!got.files.empty()) __builtin_trap();  // a problem gives no files
    return 0;
  }
  std::vector<NamedBytes> files;
  for (const auto& [name, bytes] : got.files) files.push_back({name, std::string(bytes)});
  const std::string again = pack_files(files, "");
  const UnpackedFiles back = unpack_files(again.data(), again.size());
  if (!back.problem.empty() || back.files.size() != got.files.size()) __builtin_trap();
  for (size_t i = 0; i < got.files.size(); ++i)
    if (back.files[i].first != got.files[i].first || back.files[i].second != got.files[i].second) __builtin_trap();
  return 0;
}
