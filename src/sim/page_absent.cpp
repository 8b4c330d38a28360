// A build without em++: the simulator's page is not there (sim/page_assets.h).
#include "sim/page_assets.h"

namespace cohort::sim_page {

const dashboard::Asset* find_asset(std::string_view) { return nullptr; }

}  // namespace cohort::sim_page
