// HMAC, comparison and randomness from OpenSSL's libcrypto. See message_auth.h.
#include "message_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace cohort::detail {
namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &length) == nullptr) {
    throw std::runtime_error("cohort: OpenSSL's HMAC-SHA256 failed");
  }
  return hex(mac, length);
}

bool same_mac(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_hex(size_t n) {
  std::vector<unsigned char> bytes(n);
  if (RAND_bytes(bytes.data(), static_cast<int>(n)) != 1) {
    throw std::runtime_error("cohort: OpenSSL's random generator failed");
  }
  return hex(bytes.data(), n);
}

std::string sealed_text(std::string_view key, std::string_view context, std::string_view text) {
  std::string signed_part(context);
  signed_part.append(text.data(), text.size());
  std::string out = hmac_sha256_hex(key, signed_part);
  out += ' ';
  out.append(text.data(), text.size());
  return out;
}

std::optional<std::string_view> opened_text(std::string_view key, std::string_view context, std::string_view sealed) {
  constexpr size_t kMacDigits = 64;
  if (sealed.size() <= kMacDigits || sealed[kMacDigits] != ' ') return std::nullopt;
  const std::string_view text = sealed.substr(kMacDigits + 1);
  std::string signed_part(context);
  signed_part.append(text.data(), text.size());
  if (!same_mac(sealed.substr(0, kMacDigits), hmac_sha256_hex(key, signed_part))) return std::nullopt;
  return text;
}

std::string derive_key(std::string_view token, std::string_view purpose) {
  return hmac_sha256_hex(token, std::string("cohort key: ") + std::string(purpose));
}

}  // namespace cohort::detail
