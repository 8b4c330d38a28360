// manifest.json of a prepared data set: writing, parsing with every field checked. See manifest.h.
#include "data/shards/manifest.h"

#include <xxhash.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cohort/data_file.h"
#include "cohort/error.h"
#include "runtime/json_fields.h"

namespace cohort::data {
namespace {

using nlohmann::json;
constexpr uint64_t kMaxShards = 1000000;
constexpr uint64_t kMaxManifestBytes = 256ull << 20;  // ~2 million shards' worth of JSON

json file_json(const FileEntry& f) { return {{"file", f.file}, {"bytes", f.bytes}, {"xxh3", hex64(f.xxh3)}}; }

std::string string_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw std::runtime_error(std::string("has no string \"") + key + "\"");
  return it->get<std::string>();
}

uint64_t u64_field(const json& j, const char* key) {
  return static_cast<uint64_t>(detail::integer_field(j, key, 0));
}

uint64_t hex_field(const json& j, const char* key) {
  const std::string s = string_field(j, key);
  uint64_t v = 0;
  bool ok = s.size() == 16;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    ok = ok && d >= 0;
    v = v << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
  }
  if (!ok) throw std::runtime_error(std::string("has \"") + key + "\": \"" + s.substr(0, 20) + "\", not 16 hex digits");
  return v;
}

// A shard's file is a plain name inside the data set's directory: no path, no "..", no hidden file.
FileEntry file_field(const json& j, const std::string& where) {
  if (!j.is_object()) throw std::runtime_error(where + " is not an object");
  FileEntry f;
  try {
    f.file = string_field(j, "file");
    f.bytes = u64_field(j, "bytes");
    f.xxh3 = hex_field(j, "xxh3");
  } catch (const std::exception& e) {
    throw std::runtime_error(where + " " + e.what());
  }
  if (f.file.empty() || f.file.size() > 255 || f.file[0] == '.' || f.file.find('/') != std::string::npos ||
      f.file.find('\0') != std::string::npos) {
    throw std::runtime_error(where + " names \"" + f.file.substr(0, 40) + "\", not a plain file name in the directory");
  }
  return f;
}

}  // namespace

std::string hex64(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

uint64_t xxh3_64(const void* data, uint64_t bytes) { return XXH3_64bits(data, bytes); }

const char* token_dtype(uint64_t item_bytes) { return item_bytes == 4 ? "uint32" : "uint16"; }

uint64_t Manifest::items() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.items;
  return n;
}

uint64_t Manifest::documents() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.documents;
  return n;
}

uint64_t Manifest::data_fingerprint() const {
  std::string key = kind + ":" + std::to_string(item_bytes);
  for (const auto& s : shards) key += ";" + std::to_string(s.items) + "," + hex64(s.data.xxh3) + "," + hex64(s.index.xxh3);
  return xxh3_64(key.data(), key.size());
}

std::string Manifest::to_json() const {
  json j = {{"format", "cohort-shards"}, {"version", 1}, {"kind", kind}, {"items", items()}};
  json shard_list = json::array();
  for (const auto& s : shards) {
    json e = file_json(s.data);
    e["items"] = s.items;
    if (tokens()) {
      e["documents"] = s.documents;
      e["index"] = file_json(s.index);
    }
    shard_list.push_back(e);
  }
  if (tokens()) {
    j["dtype"] = token_dtype(item_bytes);
    j["vocab_size"] = vocab_size;
    j["documents"] = documents();
    j["tokenizer"] = {{"kind", tokenizer.kind}, {"xxh3", hex64(tokenizer.xxh3)}, {"eos_id", tokenizer.eos_id}};
    if (!tokenizer.file.empty()) j["tokenizer"]["file"] = tokenizer.file;
  } else {
    j["dtype"] = "uint8";
    j["record_bytes"] = item_bytes;
  }
  j["shards"] = shard_list;
  return detail::dump_text(j, 1) + "\n";
}

Manifest Manifest::parse(const std::string& text) {
  std::string problem;
  const json j = detail::parse_capped_or_discarded(text, &problem);
  if (j.is_discarded()) throw std::runtime_error("is " + problem);
  if (!j.is_object()) throw std::runtime_error("is not a JSON object");
  if (j.value("format", json()) != "cohort-shards") throw std::runtime_error("has no \"format\": \"cohort-shards\"");
  if (detail::integer_field(j, "version", 0) != 1) throw std::runtime_error("has a version other than 1 (made by a newer cohort?)");
  Manifest m;
  m.kind = string_field(j, "kind");
  const std::string dtype = string_field(j, "dtype");
  if (m.kind == "tokens") {
    if (dtype != "uint16" && dtype != "uint32") throw std::runtime_error("has tokens of dtype \"" + dtype.substr(0, 20) + "\", not uint16 or uint32");
    m.item_bytes = dtype == "uint16" ? 2 : 4;
    m.vocab_size = static_cast<uint64_t>(detail::integer_field(j, "vocab_size", 1, dtype == "uint16" ? 65536 : 0xffffffffLL));
    auto t = j.find("tokenizer");
    if (t == j.end() || !t->is_object()) throw std::runtime_error("has no \"tokenizer\" object");
    m.tokenizer.kind = string_field(*t, "kind");
    if (m.tokenizer.kind != "bytes" && m.tokenizer.kind != "sentencepiece") throw std::runtime_error("has an unknown tokenizer kind");
    m.tokenizer.xxh3 = hex_field(*t, "xxh3");
    m.tokenizer.eos_id = detail::integer_field(*t, "eos_id", -1, static_cast<int64_t>(m.vocab_size) - 1);
    if (t->contains("file")) m.tokenizer.file = string_field(*t, "file");
  } else if (m.kind == "records") {
    if (dtype != "uint8") throw std::runtime_error("has records of dtype \"" + dtype.substr(0, 20) + "\", not uint8");
    m.item_bytes = static_cast<uint64_t>(detail::integer_field(j, "record_bytes", 1, 1LL << 30));
  } else {
    throw std::runtime_error("has \"kind\": \"" + m.kind.substr(0, 20) + "\", not \"tokens\" or \"records\"");
  }
  auto list = j.find("shards");
  if (list == j.end() || !list->is_array() || list->empty()) throw std::runtime_error("has no \"shards\" (a non-empty array)");
  if (list->size() > kMaxShards) throw std::runtime_error("lists more than " + std::to_string(kMaxShards) + " shards");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string where = "shard " + std::to_string(i);
    ShardEntry s;
    s.data = file_field(e, where);
    try {
      s.items = u64_field(e, "items");
      if (m.tokens()) s.documents = u64_field(e, "documents");
    } catch (const std::exception& ex) {
      throw std::runtime_error(where + " (" + s.data.file + ") " + ex.what());
    }
    if (s.data.bytes % m.item_bytes != 0 || s.data.bytes / m.item_bytes != s.items) {
      throw std::runtime_error(where + " (" + s.data.file + ") has " + std::to_string(s.data.bytes) + " bytes for " +
                               std::to_string(s.items) + " items of " + std::to_string(m.item_bytes) + " bytes");
    }
    if (m.tokens()) {
      auto idx = e.find("index");
      if (idx == e.end()) throw std::runtime_error(where + " (" + s.data.file + ") has no \"index\"");
      s.index = file_field(*idx, where + "'s index");
      if (s.documents > (uint64_t{1} << 50) || s.index.bytes != (s.documents + 1) * 8) {
        throw std::runtime_error(where + "'s index (" + s.index.file + ") has " + std::to_string(s.index.bytes) +
                                 " bytes for " + std::to_string(s.documents) + " documents (8 bytes per offset, one more than documents)");
      }
    }
    m.shards.push_back(s);
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::string text, problem;
  if (!read_data_file(path, {kMaxManifestBytes, "a manifest may have"}, text, problem)) throw ConfigError(-1, path + ": " + problem);
  try {
    return Manifest::parse(text);
  } catch (const std::exception& e) {
    throw ConfigError(-1, path + ": " + e.what());
  }
}

}  // namespace cohort::data
