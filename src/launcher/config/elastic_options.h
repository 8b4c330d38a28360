// launcher/config/elastic_options.h — the command line of elastic membership, parsed and checked:
// `--nnodes MIN:MAX --rdzv-endpoint HOST:PORT --rdzv-id NAME` (plus --rdzv-role, --rdzv-settle,
// --node-timeout). Pure: no sockets. The rendezvous that uses them is elastic/coordinators.h.
//
// A job is elastic when it has an --rdzv-endpoint; `--nnodes N` then means N:N (the node ranks are
// assigned by the rendezvous, as with torchrun's c10d backend). `--nnodes MIN:MAX` with MIN < MAX
// needs an endpoint.
#pragma once

#include <string>

#include "launcher/config/options.h"

namespace cohort::launcher {

inline bool is_elastic(const RunOptions& o) { return !o.rdzv_endpoint.empty(); }

/// Reads "N" (nnodes = N) or "MIN:MAX" (min_nodes, max_nodes; nnodes = MAX) into `o`; false when
/// `text` is neither (the command line turns that into its one-line error).
bool parse_nnodes(const std::string& text, RunOptions& o);

struct Endpoint {
  std::string host;  // dotted IPv4 once resolved
  int port = 0;
};

/// "HOST:PORT" or "HOST" (port 29400, torchrun's default). Throws cohort::ConfigError.
Endpoint parse_endpoint(const std::string& text);

/// Validates the elastic options and fills their defaults (MIN/MAX from --nnodes N); leaves a
/// static job's options alone, except that MIN:MAX without an endpoint is an error.
void finalize_elastic_options(RunOptions& o);

}  // namespace cohort::launcher
