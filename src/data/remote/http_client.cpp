// HTTP(S) reads through libcurl with bounded retries. See http_client.h.
#include "data/remote/http_client.h"

#include <curl/curl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

namespace cohort::data {
namespace {

struct Transfer {
  const std::function<void(uint64_t, const char*, size_t)>* sink;
  uint64_t from = 0;
  uint64_t want = 0;  // 0: whatever the body holds
  uint64_t received = 0;
  bool ranged = false;
  CURL* curl = nullptr;
  std::string problem;  // set by the callback when it stops the transfer
  bool permanent = false;
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  Transfer& t = *static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (t.received == 0 && t.ranged) {
    long code = 0;
    curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 206) {
      t.problem = "the server ignores range requests (HTTP " + std::to_string(code) + " to a Range request; it must answer 206)";
      t.permanent = true;
      return 0;
    }
  }
  if (t.want > 0 && t.received + n > t.want) {
    t.problem = "the server sent more than the " + std::to_string(t.want) + " bytes asked for";
    t.permanent = true;
    return 0;
  }
  try {
    (*t.sink)(t.from + t.received, data, n);
  } catch (const std::exception& e) {
    t.problem = e.what();
    t.permanent = true;
    return 0;
  }
  t.received += n;
  return n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

bool is_url(const std::string& location) {
  return location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0;
}

HttpClient::HttpClient(HttpPolicy policy) : policy_(policy) {
  global_init();
  curl_ = curl_easy_init();
  if (!curl_) throw HttpError("curl_easy_init failed");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string HttpClient::attempt(const std::string& url, uint64_t from, uint64_t to, uint64_t* received, bool* permanent,
                                const std::function<void(uint64_t, const char*, size_t)>& sink) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the connection
  Transfer t;
  t.sink = &sink;
  t.from = from;
  t.want = to > from ? to - from : 0;
  t.ranged = to > 0 || from > 0;
  t.curl = c;
  char error[CURL_ERROR_SIZE] = {0};
  const std::string range = std::to_string(from) + "-" + (to > 0 ? std::to_string(to - 1) : "");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (t.ranged) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: other threads run
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(policy_.timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);  // a stalled transfer fails after timeout_s
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(std::ceil(policy_.timeout_s))));
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
  const CURLcode rc = curl_easy_perform(c);
  *received = t.received;
  *permanent = t.permanent;
  if (!t.problem.empty()) return t.problem;
  if (rc == CURLE_HTTP_RETURNED_ERROR) {
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    *permanent = code < 500 && code != 408 && code != 429;  // not found, forbidden: retrying does not help
    return "HTTP " + std::to_string(code) + (code == 404 ? " (not on the server)" : "");
  }
  if (rc != CURLE_OK) return std::string(error[0] ? error : curl_easy_strerror(rc));
  if (t.want > 0 && t.received < t.want) {
    return "the body ended after " + std::to_string(t.received) + " of " + std::to_string(t.want) + " bytes";
  }
  return "";
}

void HttpClient::get_range(const std::string& url, uint64_t offset, uint64_t length,
                           const std::function<void(uint64_t, const char*, size_t)>& sink) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t pos = offset;
  const uint64_t end = offset + length;
  int failures = 0;
  while (pos < end) {
    uint64_t got = 0;
    bool permanent = false;
    const std::string problem = attempt(url, pos, end, &got, &permanent, sink);
    pos += got;
    if (problem.empty()) break;
    if (got > 0) failures = 0;  // progress: the count starts again
    if (permanent) throw HttpError(url + ": " + problem);
    if (++failures >= policy_.tries) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw HttpError(url + ": " + std::to_string(failures) + " tries over " + seconds(s) + " failed; the last: " + problem);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(policy_.backoff_s * std::pow(2.0, failures - 1)));
  }
}

std::string HttpClient::get(const std::string& url, uint64_t max_bytes) {
  const auto start = std::chrono::steady_clock::now();
  std::string body;
  auto sink = [&](uint64_t, const char* data, size_t n) {
    if (body.size() + n > max_bytes) throw std::length_error("larger than " + std::to_string(max_bytes) + " bytes");
    body.append(data, n);
  };
  for (int failures = 1;; ++failures) {
    body.clear();
    uint64_t got = 0;
    bool permanent = false;
    const std::string problem = attempt(url, 0, 0, &got, &permanent, sink);
    if (problem.empty()) return body;
    if (permanent) throw HttpError(url + ": " + problem);
    if (failures >= policy_.tries) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw HttpError(url + ": " + std::to_string(failures) + " tries over " + seconds(s) + " failed; the last: " + problem);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(policy_.backoff_s * std::pow(2.0, failures - 1)));
  }
}

}  // namespace cohort::data
