#!/usr/bin/env bash
# readme_test.sh COHORT PROGRAM: runs the README's program (readme_program.cpp) on 2 ranks for one
# epoch of Fashion-MNIST in a fresh folder; it must exit 0 and leave verifiable checkpoints of
# steps 200 and 400 (every_steps = 200; 469 steps per rank and epoch).
set -euo pipefail
cohort="$1" program="$2"
dir="$(mktemp -d /tmp/cohort-readme.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
COHORT_README_EPOCHS=1 "$cohort" run --nproc-per-node 2 --threads-per-proc 1 -- "$program"
for step in 00000200 00000400; do
  [ -f "checkpoints/step-$step/manifest.json" ] || { echo "readme_test: no checkpoint step-$step"; ls -R checkpoints || true; exit 1; }
  "$cohort" ckpt verify "checkpoints/step-$step"
done
echo "readme_test: the README's program trained and checkpointed"
