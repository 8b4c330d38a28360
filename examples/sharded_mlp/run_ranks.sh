#!/usr/bin/env bash
# run_ranks.sh N CMD...: starts N ranks of CMD on this machine (RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT set; MASTER_PORT from the environment or a free one), waits for all, and exits with
# the first non-zero status. Used by run_under_limit.sh, the memory test and the benchmark.
set -u
n=$1; shift
port=${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p"; s=$?
  if [ $status -eq 0 ] && [ $s -ne 0 ]; then status=$s; fi
done
exit $status
