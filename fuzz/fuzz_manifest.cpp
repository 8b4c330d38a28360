// Fuzzes Manifest::parse (a checkpoint's manifest.json): any text is a manifest or a
// std::runtime_error naming what is wrong, never a crash, an abort or an exception of another kind.
// What it accepts must survive the round trip to_json -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "checkpoint/format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cohort::ckpt::Manifest m;
  try {
    m = cohort::ckpt::Manifest::parse(text);
  } catch (const std::runtime_error&) {
    return 0;  // refused, with a message: what the reader expects
  }
  const std::string again = cohort::ckpt::Manifest::parse(m.to_json()).to_json();  // throws: a finding
  if (again != m.to_json()) std::abort();
  return 0;
}
