#include "checkpoint/manifest.h"

#include <nlohmann/json.hpp>  // manifest text

#include <cstdio>
#include <stdexcept>

namespace cohort::ckpt {

std::string Manifest::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = kFormatName;
  j["version"] = version;
  j["step"] = step;
  j["epoch"] = epoch;
  j["world_size"] = world_size;
  j["created_unix_ms"] = created_unix_ms;
  auto& fs = j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : files)
    fs.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", to_hex(f.xxh3)}, {"rank", f.rank}, {"role", f.role}});
  j["sampler"] = sampler_json.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(sampler_json);
  j["optimizer"] = optimizer_json.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(optimizer_json);
  auto& rs = j["rng"] = nlohmann::ordered_json::array();
  for (const auto& r : rng) rs.push_back({{"rank", r.rank}, {"cpu", r.cpu}, {"cuda", r.cuda}});
  j["metadata"] = metadata;
  if (!user.empty()) j["user"] = user;
  if (!sharding_json.empty()) j["sharding"] = nlohmann::ordered_json::parse(sharding_json);  // sharded only
  return j.dump(1) + "\n";
}

Manifest Manifest::parse(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("is not JSON (") + e.what() + ")");
  }
  Manifest m;
  try {
    if (j.at("format").get<std::string>() != kFormatName)
      throw std::runtime_error("is not a cohort checkpoint manifest (format \"" + j.at("format").get<std::string>() + "\")");
    m.version = j.at("version").get<int>();
    if (m.version != kFormatVersion)
      throw std::runtime_error("has format version " + std::to_string(m.version) + "; this cohort reads version " +
                               std::to_string(kFormatVersion));
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.created_unix_ms = j.value("created_unix_ms", int64_t{0});
    for (const auto& f : j.at("files")) {
      ManifestFile mf;
      mf.name = f.at("name").get<std::string>();
      if (mf.name.empty() || mf.name.find('/') != std::string::npos || mf.name[0] == '.')
        throw std::runtime_error("lists a file outside its directory: \"" + mf.name + "\"");
      mf.bytes = f.at("bytes").get<uint64_t>();
      mf.xxh3 = from_hex(f.at("xxh3").get<std::string>());
      mf.rank = f.at("rank").get<int>();
      mf.role = f.at("role").get<std::string>();
      m.files.push_back(std::move(mf));
    }
    if (!j.at("sampler").is_null()) m.sampler_json = j.at("sampler").dump();
    if (!j.at("optimizer").is_null()) m.optimizer_json = j.at("optimizer").dump();
    for (const auto& r : j.at("rng")) {
      RankRng rr;
      rr.rank = r.at("rank").get<int>();
      rr.cpu = r.at("cpu").get<std::string>();
      rr.cuda = r.value("cuda", std::vector<std::string>{});
      m.rng.push_back(std::move(rr));
    }
    m.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    if (j.contains("user")) m.user = j.at("user").get<std::map<std::string, std::string>>();
    if (j.contains("sharding") && !j.at("sharding").is_null()) m.sharding_json = j.at("sharding").dump();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("is missing a field or has a wrong type (") + e.what() + ")");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("has a bad checksum: ") + e.what());
  }
  return m;
}

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

int64_t step_from_dir_name(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0) return -1;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) return -1;
  return std::stoll(digits);
}

std::string bytes_to_hex(const void* data, size_t bytes) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out(bytes * 2, '0');
  for (size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::vector<uint8_t> hex_to_bytes(const std::string& hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("not a hex digit");
  };
  if (hex.size() % 2) throw std::invalid_argument("odd number of hex digits");
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]));
  return out;
}

}  // namespace cohort::ckpt
