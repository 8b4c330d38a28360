#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), then trains the Fashion-MNIST CNN for 5 epochs on two
# local workers started and supervised by `cohort run` (rank 0 hosts the store on loopback, on a
# free port) and prints each rank's result line. Extra arguments go to the example, e.g. `--epochs 1`.
# It checkpoints every 200 steps to runs/fashion_mnist/checkpoints (in the background), restarts
# failed workers from the newest checkpoint up to 3 times (with warm spares: the next workers wait
# ready, so a restart takes about 0.3 s), and, started again, resumes where the
# last run stopped (`cohort ckpt list runs/fashion_mnist/checkpoints`; delete the folder for a
# fresh run). Its live dashboard's address is printed at start (loopback only); the event log is
# runs/fashion_mnist/events.jsonl (`build/tools/cohort dashboard runs/fashion_mnist` replays it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/tools/cohort run --nproc-per-node 2 --max-restarts 3 --warm-spares --run-dir runs/fashion_mnist -- build/examples/fashion_mnist/fashion_mnist \
  --ckpt-dir runs/fashion_mnist/checkpoints --ckpt-every 200 "$@"
