// Signing and checking the ranks' checkpoint commit parts. See commit_parts.h.
#include "commit_parts.h"

#include "runtime/message_auth.h"

namespace cohort::ckpt {
namespace {

constexpr size_t kMacDigits = 64;

std::string signed_text(const std::string& store_key, int round, const std::string& json) {
  return "cohort-ckpt-part-1 " + store_key + " round " + std::to_string(round) + "\n" + json;
}

}  // namespace

std::string sealed_part(const std::string& job_key, const std::string& store_key, int round, const nlohmann::json& part) {
  const std::string json = part.dump();
  if (job_key.empty()) return json;
  return detail::hmac_sha256_hex(job_key, signed_text(store_key, round, json)) + " " + json;
}

std::optional<nlohmann::json> opened_part(const std::string& job_key, const std::string& store_key, int round,
                                          const std::string& value) {
  std::string json = value;
  if (!job_key.empty()) {
    if (value.size() <= kMacDigits + 1 || value[kMacDigits] != ' ') return std::nullopt;
    json = value.substr(kMacDigits + 1);
    const std::string expected = detail::hmac_sha256_hex(job_key, signed_text(store_key, round, json));
    if (!detail::same_mac(std::string_view(value).substr(0, kMacDigits), expected)) return std::nullopt;
  }
  auto part = nlohmann::json::parse(json, nullptr, false);
  if (part.is_discarded() || !part.is_object()) return std::nullopt;
  return part;
}

}  // namespace cohort::ckpt
