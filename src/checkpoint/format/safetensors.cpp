#include "checkpoint/format/safetensors.h"

#include <nlohmann/json.hpp>  // header text

#include <unistd.h>  // close

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "checkpoint/storage/file_io.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {
namespace {

// A header larger than this is not one we wrote (the reference implementation caps it at 100 MB).
constexpr uint64_t kMaxHeader = 100u << 20;

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

int dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

std::string build_header(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the data order in the text, which makes files easy to read.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    t.begin = offset;
    t.end = offset + elements * static_cast<uint64_t>(dtype_size(t.dtype));
    offset = t.end;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = detail::dump_text(header);  // tensor names and metadata: any bytes
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned for mmap readers
  return le64(text.size()) + text;
}

uint64_t needed_prefix(const std::string& first_bytes) {
  if (first_bytes.size() < 8) return 8;
  return 8 + read_le64(first_bytes.data());
}

SafetensorsHeader parse_header(const std::string& prefix, uint64_t file_bytes) {
  if (file_bytes < 8 || prefix.size() < 8) throw std::runtime_error("shorter than a safetensors header (8 bytes)");
  const uint64_t n = read_le64(prefix.data());
  if (n > kMaxHeader) throw std::runtime_error("header length " + std::to_string(n) + " is not plausible");
  if (8 + n > file_bytes)
    throw std::runtime_error("truncated: the header needs " + std::to_string(8 + n) + " bytes, the file has " +
                             std::to_string(file_bytes));
  if (prefix.size() < 8 + n) throw std::runtime_error("header not fully read");
  nlohmann::json j;
  bool too_deep = false;
  try {
    j = detail::parse_capped(prefix.begin() + 8, prefix.begin() + 8 + static_cast<long>(n), &too_deep);
  } catch (const nlohmann::json::exception& e) {
    if (too_deep) throw std::runtime_error("header is nested deeper than " + std::to_string(detail::kMaxJsonDepth) + " levels");
    throw std::runtime_error(std::string("header is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::runtime_error("header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw std::runtime_error("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        out.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    TensorEntry t;
    t.name = it.key();
    // Every number is checked for its kind: get<int64_t>() of 1e300 or of -1 as uint64 would
    // turn garbage into a plausible shape.
    const auto malformed = [&](const std::string& what) {
      return std::runtime_error("entry \"" + t.name + "\" is malformed: " + what);
    };
    if (!it->is_object()) throw malformed("not an object");
    const auto dtype = it->find("dtype");
    const auto shape = it->find("shape");
    const auto offsets = it->find("data_offsets");
    if (dtype == it->end() || !dtype->is_string()) throw malformed("no dtype string");
    if (shape == it->end() || !shape->is_array()) throw malformed("no shape list");
    if (offsets == it->end() || !offsets->is_array() || offsets->size() != 2) throw malformed("data_offsets needs two numbers");
    t.dtype = dtype->get<std::string>();
    for (const auto& d : *shape) {
      if (!detail::is_integer_in(d, 0, std::numeric_limits<int64_t>::max()))
        throw std::runtime_error("tensor \"" + t.name + "\" has a dimension that is not a non-negative integer");
      t.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : *offsets)
      if (!o.is_number_unsigned() && !detail::is_integer_in(o, 0, std::numeric_limits<int64_t>::max()))
        throw malformed("data_offsets are not non-negative integers");
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    const int size = dtype_size(t.dtype);
    if (size == 0) throw std::runtime_error("tensor \"" + t.name + "\" has unknown dtype " + t.dtype);
    // The byte count, checked for overflow: [2^32, 2^32] elements would otherwise wrap to 0 bytes.
    uint64_t bytes = static_cast<uint64_t>(size);
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
        throw std::runtime_error("tensor \"" + t.name + "\" has a shape whose size overflows");
    }
    if (t.end < t.begin || t.end - t.begin != bytes)
      throw std::runtime_error("tensor \"" + t.name + "\": its byte range does not match its shape and dtype");
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const auto& t : out.tensors) {
    if (t.begin != expected)
      throw std::runtime_error("tensor \"" + t.name + "\" does not start where the previous one ends");
    expected = t.end;
  }
  out.data_bytes = expected;
  if (out.data_start + out.data_bytes != file_bytes)
    throw std::runtime_error((out.data_start + out.data_bytes > file_bytes ? "truncated: the tensors need "
                                                                            : "trailing bytes: the tensors need ") +
                             std::to_string(out.data_start + out.data_bytes) + " bytes, the file has " +
                             std::to_string(file_bytes));
  return out;
}

SafetensorsHeader read_header(const std::string& path) {
  uint64_t file_bytes = 0;
  int fd = -1;
  try {
    fd = open_checkpoint_file(path, -1, &file_bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  auto read_at = [&](std::string& into, uint64_t offset) { into.resize(read_at_most(fd, into.data(), into.size(), offset)); };
  std::string prefix(std::min<uint64_t>(8, file_bytes), '\0');
  read_at(prefix, 0);
  const uint64_t need = needed_prefix(prefix);
  if (need > 8 && need <= file_bytes && need <= kMaxHeader + 8) {
    std::string rest(need - 8, '\0');
    read_at(rest, 8);
    prefix += rest;
  }
  ::close(fd);
  return parse_header(prefix, file_bytes);
}

}  // namespace cohort::ckpt
