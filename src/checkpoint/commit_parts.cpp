// Signing and checking the ranks' checkpoint commit parts. See commit_parts.h.
#include "commit_parts.h"

#include "runtime/net/message_auth.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {
namespace {

// What a part's MAC binds it to besides its JSON: the store key (sequence, save, rank) and the round.
std::string context(const std::string& store_key, int round) {
  return "cohort-ckpt-part-1 " + store_key + " round " + std::to_string(round) + "\n";
}

}  // namespace

std::string sealed_part(const std::string& job_key, const std::string& store_key, int round, const nlohmann::json& part) {
  const std::string json = detail::dump_text(part);  // an error names a path: any bytes
  return job_key.empty() ? json : detail::sealed_text(job_key, context(store_key, round), json);
}

std::optional<nlohmann::json> opened_part(const std::string& job_key, const std::string& store_key, int round,
                                          const std::string& value) {
  std::optional<std::string_view> json = std::string_view(value);
  if (!job_key.empty()) json = detail::opened_text(job_key, context(store_key, round), value);
  if (!json) return std::nullopt;
  auto part = detail::parse_capped_or_discarded(json->begin(), json->end());
  if (part.is_discarded() || !part.is_object()) return std::nullopt;
  return part;
}

}  // namespace cohort::ckpt
