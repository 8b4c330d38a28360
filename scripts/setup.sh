#!/usr/bin/env bash
# Installs cohort's dependencies from Debian 12's packages (only those missing) and builds cohort
# into build/. Idempotent: a second run installs nothing and rebuilds only what changed.
# A libtorch 2.x is used instead of Debian's 1.13 when CMAKE_PREFIX_PATH points at it.
# COHORT_SETUP_NO_BUILD=1 installs the packages only (scripts/build-torch2.sh builds elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config  # toolchain
  libtorch-dev          # libtorch 1.13: tensors, autograd, nn, optim, data, c10d (TCPStore, Gloo)
  libgloo-dev           # Gloo headers, needed to compile against c10d's ProcessGroupGloo
  libopenblas0-pthread  # optimized BLAS behind libtorch's libblas.so.3 (the default is the slow reference BLAS)
  nlohmann-json3-dev    # JSON (result lines, sampler state, later manifests and metrics)
  libcli11-dev          # command-line parsing (cohort, examples)
  libspdlog-dev         # the logger
  libxxhash-dev         # fast hashes: model signatures, parameter checksums, later file checksums
  zlib1g-dev            # reading gzipped IDX files
  libssl-dev            # OpenSSL's libcrypto: HMAC-SHA256 and random bytes for the job token (docs/security.md)
  libcpp-httplib-dev    # the HTTP server of the dashboard and /metrics (header-only)
  libsentencepiece-dev  # `cohort data prepare`: trains (BPE) and runs SentencePiece tokenizers (docs/data.md)
  libcurl4-openssl-dev  # remote data sets: shards fetched over HTTP(S) with range requests into a local cache (docs/data.md)
  libjs-chart.js        # the dashboard's charts (Chart.js), embedded in the binary at build time
  libgtest-dev          # GoogleTest
  dataset-fashion-mnist # the example's data set (gzipped IDX under /usr/share/datasets/fashion-mnist)
  fortunes              # the GPT example's corpus: ~2.5 MB of English text under /usr/share/games/fortunes
  python3-torch         # the peer: PyTorch's Python DDP/DistributedSampler on the same libtorch (tests, bench)
  procps                # ps/pgrep, used by the process tests
  iproute2              # ip netns + veth: the launcher's two-node test runs nodes as network namespaces
  emscripten            # em++: the simulator's C++ core compiled to WebAssembly for its page (web/sim/)
)
bash scripts/apt-install-missing.sh setup "${packages[@]}"

[ "${COHORT_SETUP_NO_BUILD:-0}" = 1 ] && exit 0
# A unity build (CMake joins each target's sources in batches of 8): the torch templates a source
# instantiates are compiled once per batch, not once per file — a build from scratch takes about
# half the time on 2 cores. COHORT_UNITY_BUILD=OFF for a tree one edits file by file.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${COHORT_BUILD_TYPE:-Release}" -DCMAKE_UNITY_BUILD="${COHORT_UNITY_BUILD:-ON}" \
  ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH"} >/dev/null
cmake --build build
