// dashboard/assets.h — the page's files (web/ and Debian's Chart.js), embedded in the binary at
// build time by cmake/embed_assets.cmake, so that nothing is read from disk at run time.
#pragma once

#include <cstddef>
#include <string_view>

namespace cohort::dashboard {

struct Asset {
  const char* name;          // "index.html", "app.js", "style.css", "chart.min.js"
  const char* content_type;  // with charset for text
  const unsigned char* data;
  size_t size;
  std::string_view view() const { return {reinterpret_cast<const char*>(data), size}; }
};

/// The embedded file of that name, or nullptr.
const Asset* find_asset(std::string_view name);

}  // namespace cohort::dashboard
