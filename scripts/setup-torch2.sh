#!/usr/bin/env bash
# Installs PyTorch 2.x (pinned in requirements/torch2.txt: the CUDA build from Python's package
# index, whose wheel carries libtorch, its headers and CMake config) into a cached venv
# (scripts/make-venv.sh; several GB, so fresh clones and CI runs on one machine share it).
# Prints the venv's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/make-venv.sh requirements/torch2.txt venv-torch2
