// Fuzzes the parsers of a prepared data set (src/data/shards/, docs/data.md): manifest.json and a
// token shard's document index. Any manifest text is a Manifest or a std::runtime_error, never
// another exception or a crash, and one it accepts comes back unchanged through to_json(); any
// index bytes are accepted or a ConfigError. The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cohort/error.h"
#include "data/shards/manifest.h"
#include "data/shards/shard_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 'I') {  // "I", then the shard's token count (8 bytes), then the offsets
    if (size < 1 + 8 + 8) return 0;
    uint64_t tokens;
    std::memcpy(&tokens, data + 1, 8);
    const uint64_t documents = (size - 9) / 8 - 1;
    try {
      cohort::data::check_document_index(data + 9, documents, tokens, "index");
    } catch (const cohort::ConfigError&) {
    }
    return 0;
  }
  cohort::data::Manifest m;
  try {
    m = cohort::data::Manifest::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string text = m.to_json();
  if (cohort::data::Manifest::parse(text).to_json() != text) __builtin_trap();
  return 0;
}
