// checkpoint/commit_parts.h — each rank's part of a checkpoint commit as it travels through the
// job's store to rank 0: the rank's RNG state, the shard files it wrote, or its error.
//
// The store of a job of several machines is c10d's TCPStore, which anyone who reaches its port can
// write to. Under cohort run every rank has the job key (COHORT_JOB_KEY, derived from the job's
// token): a part is stored as "<HMAC-SHA256> <json>", the MAC covering the store key (the
// checkpoint's sequence, save and rank) and the round, so that a part forged, or recorded in another
// save or round and replayed, is recognised and never committed. Without a key (a program not
// started by cohort run), parts are plain JSON as before. See docs/security.md.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace cohort::ckpt {

/// The value rank `store_key`'s part is stored as.
std::string sealed_part(const std::string& job_key, const std::string& store_key, int round, const nlohmann::json& part);

/// The part in `value` when it is authentic (with a key) or a JSON object (without one); else
/// nullopt: forged, replayed from elsewhere, or not JSON.
std::optional<nlohmann::json> opened_part(const std::string& job_key, const std::string& store_key, int round,
                                          const std::string& value);

}  // namespace cohort::ckpt
