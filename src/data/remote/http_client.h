// data/remote/http_client.h — HTTP(S) reads for remote data sets through libcurl: a whole small
// file (the manifest, an index) or a byte range of a shard (a Range request), with bounded retries
// and backoff and timeouts that turn a dead or stalled server into an error instead of a hang.
// Torch-free. One client is one curl handle (one kept-alive connection): use it from one thread
// at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace cohort::data {

/// How a client retries and when it gives up.
struct HttpPolicy {
  int tries = 5;           ///< attempts per request (a request that made progress starts its count again)
  double backoff_s = 0.5;  ///< the wait before the second attempt; it doubles for each next one
  double timeout_s = 10;   ///< connect timeout, and how long a transfer may stall (< 1 KiB/s) before it fails
};

/// Thrown when a request failed for good: after its tries (the server is down or stalls), or at
/// once for an answer that retrying does not change (404, a server that ignores ranges). what()
/// is the URL and the problem, without a rank.
class HttpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An http:// or https:// location.
bool is_url(const std::string& location);

/// One libcurl easy handle and a retry policy.
class HttpClient {
 public:
  explicit HttpClient(HttpPolicy policy);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// The whole body of `url` (at most `max_bytes`: a bigger body is an HttpError).
  std::string get(const std::string& url, uint64_t max_bytes);
  /// Bytes [offset, offset + length) of `url`, handed to `sink(position, data, n)` in order;
  /// after a broken transfer the retry asks for the rest only (Range from where it broke).
  void get_range(const std::string& url, uint64_t offset, uint64_t length,
                 const std::function<void(uint64_t position, const char* data, size_t n)>& sink);

 private:
  // One attempt at [from, to) (to = 0: the whole body); returns "" on success, else the problem.
  // `permanent` is set when retrying cannot help.
  std::string attempt(const std::string& url, uint64_t from, uint64_t to, uint64_t* received, bool* permanent,
                      const std::function<void(uint64_t, const char*, size_t)>& sink);
  HttpPolicy policy_;
  void* curl_ = nullptr;
};

}  // namespace cohort::data
