#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), then trains the Fashion-MNIST CNN for 5 epochs on two
# local workers started and supervised by `cohort run` (rank 0 hosts the store on loopback, on a
# free port) and prints each rank's result line. Extra arguments go to the example, e.g. `--epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/cohort run --nproc-per-node 2 -- build/examples/fashion_mnist/fashion_mnist "$@"
