// runtime/net/message_auth.h — the few cryptographic operations cohort needs to tell its own messages
// from anyone else's: HMAC-SHA256, a constant-time comparison and random bytes, all from OpenSSL's
// libcrypto (no hand-written crypto). Used by the launcher's agent messages (launcher/io/channel.h)
// and by the workers' checkpoint commit parts (checkpoint/save_commit.cpp); see docs/security.md.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::detail {

/// HMAC-SHA256 of `data` under `key`, as 64 lowercase hex digits.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

/// Whether two MACs are equal, in time independent of where they differ (a timing difference must
/// not tell an attacker how much of a guess was right).
bool same_mac(std::string_view a, std::string_view b);

/// `n` bytes from OpenSSL's CSPRNG as 2n lowercase hex digits. Throws when the generator fails.
std::string random_hex(size_t n);

/// `text` as "<mac> <text>": the MAC is the HMAC-SHA256 under `key` of `context` (what else the
/// message is bound to: its sender, number, place) followed by `text`.
std::string sealed_text(std::string_view key, std::string_view context, std::string_view text);

/// The text of a sealed_text() value when its MAC is right for `key` and `context`; else nullopt.
std::optional<std::string_view> opened_text(std::string_view key, std::string_view context, std::string_view sealed);

/// A key for one purpose derived from the job's token (HMAC of the purpose under the token), so
/// that a key handed to the workers ("checkpoint parts") is not the one that signs agent messages.
std::string derive_key(std::string_view token, std::string_view purpose);

}  // namespace cohort::detail
