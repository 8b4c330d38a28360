#include "checkpoint/format/manifest.h"

#include <nlohmann/json.hpp>  // manifest text

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "runtime/json_fields.h"

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
  j["sampler"] = sampler_json.empty() ? nlohmann::ordered_json() : detail::parse_capped<nlohmann::ordered_json>(sampler_json);
  j["optimizer"] = optimizer_json.empty() ? nlohmann::ordered_json() : detail::parse_capped<nlohmann::ordered_json>(optimizer_json);
  auto& rs = j["rng"] = nlohmann::ordered_json::array();
  for (const auto& r : rng) rs.push_back({{"rank", r.rank}, {"cpu", r.cpu}, {"cuda", r.cuda}});
  j["metadata"] = metadata;
  if (!user.empty()) j["user"] = user;
  if (!sharding_json.empty()) j["sharding"] = detail::parse_capped<nlohmann::ordered_json>(sharding_json);  // sharded only
  if (!rank_state.empty()) {
    auto& texts = j["rank_state"] = nlohmann::ordered_json::object();
    for (const auto& [rank, text] : rank_state) texts[std::to_string(rank)] = text;
  }
  if (!program.empty()) j["program"] = program;
  return detail::dump_text(j, 1) + "\n";  // metadata and user strings: any bytes
}

namespace {

// Bounds of the manifest's numbers: far beyond any real job, low enough that arithmetic on them
// (step + 1, bytes summed over files) cannot overflow.
constexpr int64_t kMaxStep = int64_t{1} << 62;
constexpr int64_t kMaxWorldSize = 1 << 24;
constexpr int64_t kMaxFileBytes = int64_t{1} << 56;
constexpr size_t kMaxProgramIdentity = 256;  // a label or "exe-xxh3:<16 hex>" (program_identity.h)

std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw std::runtime_error(std::string("has no \"") + key + "\" string");
  return it->get<std::string>();
}

const nlohmann::json& array_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) throw std::runtime_error(std::string("has no \"") + key + "\" list");
  return *it;
}

// The files a checkpoint must list: rank 0's model file; the optimizer file where the manifest
// describes optimizer state of replicated training; one shard per rank of sharded training.
void check_required_files(const Manifest& m) {
  std::set<std::string> names;
  int models = 0, optimizers = 0;
  std::vector<int> shards(static_cast<size_t>(m.world_size), 0), rank_states(shards);
  for (const auto& f : m.files) {
    if (!names.insert(f.name).second) throw std::runtime_error("lists \"" + f.name + "\" twice");
    if (f.role == "model") ++models;
    if (f.role == "optimizer") ++optimizers;
    if (f.role == "shard") ++shards[static_cast<size_t>(f.rank)];
    if (f.role == "rank_state") ++rank_states[static_cast<size_t>(f.rank)];
  }
  if (models != 1) throw std::runtime_error("lists " + std::to_string(models) + " model files, not 1");
  const bool sharded = !m.sharding_json.empty();
  if (!sharded && optimizers != (m.optimizer_json.empty() ? 0 : 1))
    throw std::runtime_error("lists " + std::to_string(optimizers) + " optimizer files for " +
                             (m.optimizer_json.empty() ? "no" : "one") + " optimizer");
  for (size_t r = 0; r < shards.size(); ++r) {
    if (shards[r] != (sharded ? 1 : 0))
      throw std::runtime_error("lists " + std::to_string(shards[r]) + " shard files of rank " + std::to_string(r) +
                               (sharded ? ", not 1" : " for replicated state"));
  }
  // Ranks' own state: a file and a text for every rank, or for none.
  const int expected = m.rank_state.empty() ? 0 : 1;
  if (sharded && expected) throw std::runtime_error("has \"rank_state\" beside sharded state");
  for (size_t r = 0; r < rank_states.size(); ++r) {
    if (rank_states[r] != expected || (expected && !m.rank_state.count(static_cast<int>(r))))
      throw std::runtime_error("lists " + std::to_string(rank_states[r]) + " rank_state files of rank " +
                               std::to_string(r) + (m.rank_state.count(static_cast<int>(r)) ? " with" : " without") +
                               " its text; every rank has both, or none");
  }
}

// The optimizer description (training_state.h): {"type": "Adam", "groups": [{"lr": 0.001, "params": 4}]}.
void check_optimizer_description(const nlohmann::json& d) {
  const bool ok = d.contains("type") && d["type"].is_string() && d.contains("groups") && d["groups"].is_array();
  if (!ok) throw std::runtime_error("has an \"optimizer\" without a \"type\" string and a \"groups\" list");
  for (const auto& g : d["groups"]) {
    const bool group_ok = g.is_object() && g.contains("lr") && g["lr"].is_number() &&
                          std::isfinite(g["lr"].get<double>()) && g.contains("params") &&
                          detail::is_integer_in(g["params"], 0, std::numeric_limits<int64_t>::max());
    if (!group_ok) throw std::runtime_error("has an optimizer group without a finite \"lr\" and a \"params\" count");
  }
}

std::map<std::string, std::string> string_map(const nlohmann::json& j, const char* key) {
  std::map<std::string, std::string> out;
  auto it = j.find(key);
  if (it == j.end()) return out;
  if (!it->is_object()) throw std::runtime_error(std::string("has \"") + key + "\" that is not an object");
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) throw std::runtime_error(std::string("has \"") + key + "\" with a value that is not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace

Manifest Manifest::parse(const std::string& text) {
  nlohmann::json j;
  bool too_deep = false;
  try {
    j = detail::parse_capped(text, &too_deep);
  } catch (const nlohmann::json::exception& e) {
    if (too_deep) throw std::runtime_error("is nested deeper than " + std::to_string(detail::kMaxJsonDepth) + " levels");
    throw std::runtime_error(std::string("is not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error("is not a JSON object");
  using detail::integer_field;
  Manifest m;
  try {
    const std::string format = string_field(j, "format");
    if (format != kFormatName)
      throw std::runtime_error("is not a cohort checkpoint manifest (format \"" + format.substr(0, 40) + "\")");
    m.version = static_cast<int>(integer_field(j, "version", 0, 1 << 30));
    if (m.version != kFormatVersion)
      throw std::runtime_error("has format version " + std::to_string(m.version) + "; this cohort reads version " +
                               std::to_string(kFormatVersion));
    m.step = integer_field(j, "step", 0, kMaxStep);
    m.epoch = integer_field(j, "epoch", 0, kMaxStep);
    m.world_size = static_cast<int>(integer_field(j, "world_size", 1, kMaxWorldSize));
    if (j.contains("created_unix_ms")) m.created_unix_ms = integer_field(j, "created_unix_ms", 0);
    for (const auto& f : array_field(j, "files")) {
      if (!f.is_object()) throw std::runtime_error("lists a file that is not an object");
      ManifestFile mf;
      mf.name = string_field(f, "name");
      if (mf.name.empty() || mf.name.find('/') != std::string::npos || mf.name[0] == '.')
        throw std::runtime_error("lists a file outside its directory: \"" + mf.name + "\"");
      mf.bytes = static_cast<uint64_t>(integer_field(f, "bytes", 0, kMaxFileBytes));
      mf.xxh3 = from_hex(string_field(f, "xxh3"));
      mf.rank = static_cast<int>(integer_field(f, "rank", 0, m.world_size - 1));
      mf.role = string_field(f, "role");
      if (mf.role != "model" && mf.role != "optimizer" && mf.role != "shard" && mf.role != "rank_state")
        throw std::runtime_error("lists \"" + mf.name + "\" with role \"" + mf.role.substr(0, 40) + "\"");
      m.files.push_back(std::move(mf));
    }
    auto object_or_null = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || (!it->is_null() && !it->is_object()))
        throw std::runtime_error(std::string("has no \"") + key + "\" object (or null)");
      return it->is_null() ? std::string() : it->dump();
    };
    m.sampler_json = object_or_null("sampler");
    m.optimizer_json = object_or_null("optimizer");
    if (!m.optimizer_json.empty()) check_optimizer_description(j["optimizer"]);
    for (const auto& r : array_field(j, "rng")) {
      if (!r.is_object()) throw std::runtime_error("has an RNG state that is not an object");
      RankRng rr;
      rr.rank = static_cast<int>(integer_field(r, "rank", 0, m.world_size - 1));
      rr.cpu = string_field(r, "cpu");
      const auto check_hex = [&](const std::string& hex) {
        try {
          hex_to_bytes(hex);
        } catch (const std::invalid_argument&) {
          throw std::runtime_error("has an RNG state of rank " + std::to_string(rr.rank) + " that is not hex");
        }
      };
      check_hex(rr.cpu);
      if (r.contains("cuda")) {
        if (!r["cuda"].is_array()) throw std::runtime_error("has CUDA RNG states that are not a list");
        for (const auto& c : r["cuda"]) {
          if (!c.is_string()) throw std::runtime_error("has a CUDA RNG state that is not a string");
          rr.cuda.push_back(c.get<std::string>());
          check_hex(rr.cuda.back());
        }
      }
      m.rng.push_back(std::move(rr));
    }
    if (!j.contains("metadata")) throw std::runtime_error("has no \"metadata\"");
    m.metadata = string_map(j, "metadata");
    m.user = string_map(j, "user");
    if (j.contains("sharding") && !j.at("sharding").is_null()) {
      if (!j.at("sharding").is_object()) throw std::runtime_error("has \"sharding\" that is not an object");
      m.sharding_json = j.at("sharding").dump();
    }
    for (const auto& [key, text] : string_map(j, "rank_state")) {
      const bool digits = !key.empty() && key.size() <= 8 && key.find_first_not_of("0123456789") == std::string::npos;
      const long long rank = digits ? std::stoll(key) : -1;
      if (rank < 0 || rank >= m.world_size)
        throw std::runtime_error("has \"rank_state\" of \"" + key.substr(0, 40) + "\", not a rank of the job");
      m.rank_state[static_cast<int>(rank)] = text;
    }
    if (j.contains("program")) {
      m.program = string_field(j, "program");
      if (m.program.empty() || m.program.size() > kMaxProgramIdentity)
        throw std::runtime_error("has a \"program\" of " + std::to_string(m.program.size()) + " characters (1 to " +
                                 std::to_string(kMaxProgramIdentity) + ")");
    }
    check_required_files(m);
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
