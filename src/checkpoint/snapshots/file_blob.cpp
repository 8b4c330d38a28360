// Several files as one byte string. See file_blob.h.
#include "checkpoint/snapshots/file_blob.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "checkpoint/storage/file_io.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {

std::string pack_files(const std::vector<NamedBytes>& files, const char* tag) {
  nlohmann::json index = nlohmann::json::array();
  size_t total = 0;
  for (const auto& f : files) {
    index.push_back({{"name", f.name}, {"bytes", f.bytes.size()}, {"xxh3", to_hex(XXH3_64bits(f.bytes.data(), f.bytes.size()))}});
    total += f.bytes.size();
  }
  const std::string head = detail::dump_text(index);
  std::string blob(8, '\0');
  const uint64_t head_bytes = head.size();
  std::memcpy(blob.data(), &head_bytes, 8);
  blob.reserve(8 + head.size() + total);
  blob += head;
  for (const auto& f : files) blob += f.bytes;
  if (const char* v = std::getenv("COHORT_TEST_DAMAGE_BLOB"); v && std::string(v) == tag && total > 0) blob.back() ^= 0x5a;
  return blob;
}

UnpackedFiles unpack_files(const char* blob, size_t size) {
  uint64_t head_bytes = 0;
  if (size < 8) return {{}, "too short"};
  std::memcpy(&head_bytes, blob, 8);
  if (head_bytes > size - 8) return {{}, "index past the end"};
  const auto index = detail::parse_capped_or_discarded(blob + 8, blob + 8 + head_bytes);
  if (!index.is_array()) return {{}, "no index"};
  UnpackedFiles out;
  size_t at = 8 + head_bytes;
  for (const auto& e : index) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("bytes") ||
        !e["bytes"].is_number_unsigned() || !e.contains("xxh3") || !e["xxh3"].is_string())
      return {{}, "a malformed index entry"};
    const std::string name = e["name"].get<std::string>();
    const uint64_t bytes = e["bytes"].get<uint64_t>();
    if (bytes > size - at) return {{}, name + ": past the end"};
    const std::string_view data(blob + at, bytes);
    uint64_t expected = 0;
    try {
      expected = from_hex(e["xxh3"].get<std::string>());
    } catch (const std::exception&) {
      return {{}, name + ": a malformed checksum"};
    }
    if (XXH3_64bits(data.data(), data.size()) != expected) return {{}, name + ": checksum mismatch on arrival"};
    out.files.emplace_back(name, data);
    at += bytes;
  }
  return out;
}

}  // namespace cohort::ckpt
