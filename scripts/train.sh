#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), then trains the Fashion-MNIST CNN for 5 epochs on two
# local ranks (cohort's built-in rendezvous: rank 0 hosts the store on loopback) and prints each
# rank's result line. Extra arguments go to the example, e.g. `--epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
port=$(( 20000 + RANDOM % 20000 ))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    build/examples/fashion_mnist/fashion_mnist "$@" > >(sed -u "s/^/[$rank] /") 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
trap - EXIT
exit $status
