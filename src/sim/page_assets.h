// The simulator's page (web/sim/ and its WebAssembly core), embedded at build time like the
// dashboard's (cmake/embed_assets.cmake); nullptr for every name in a build without em++.
#pragma once

#include <string_view>

#include "dashboard/assets.h"

namespace cohort::sim_page {

const dashboard::Asset* find_asset(std::string_view name);

/// Why the page is missing, for the servers' messages.
inline constexpr const char* kMissing =
    "this cohort was built without the simulator's page (it needs em++: install Debian's emscripten, then rebuild; "
    "scripts/setup.sh does both)";

}  // namespace cohort::sim_page
