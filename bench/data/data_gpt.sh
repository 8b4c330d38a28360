#!/usr/bin/env bash
# data_gpt.sh [GIB] [STEPS]: the GPT example on prepared data, 2 ranks (`cohort run --nproc-per-node
# 2 -- gpt --preset tiny --data DIR --phase-times`), STEPS steps each (default 100). Issue 46:
#   wait:   the data wait is <= 1 % of the step. The fortunes corpus prepared with the bytes
#           tokenizer (vocabulary 256: the tiny preset's own, its fastest step, so the largest share)
#           and with a SentencePiece model (--vocab 8000, as docs/gpt.md prepares it).
#   memory: every rank's peak RSS on a generated data set of GIB GiB (default 20; random tokens of
#           GPT-2's vocabulary 50257, build/bench/data_peers --generate) is within 50 MB of the same
#           run on a 10 MiB one, and RSS is flat over the run.
# One JSON line per rank and run (bench/data/data_gpt.py says what each field is). ONLY=wait or
# ONLY=memory runs one part; GPT_ARGS adds flags to every gpt run (e.g. "--batch 2": the
# vocabulary of 50257 makes the memory runs' steps ~8x the bytes runs' on a CPU). Data sets go under ${DATA_BENCH_DIR:-/var/tmp/cohort-gpt-bench},
# removed at the end unless KEEP=1 (a kept GIB set is used again by the next run).
set -euo pipefail
cd "$(dirname "$0")/../.."
gib="${1:-20}" steps="${2:-100}" only="${ONLY:-}"
root="${DATA_BENCH_DIR:-/var/tmp/cohort-gpt-bench}"
cohort=build/tools/cohort
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$root"' EXIT
mkdir -p "$root"

run_gpt() {  # LABEL DATA_DIR
  rm -rf "$root/run-$1"
  python3 bench/data/data_gpt.py "$1" "$root/run-$1" -- "$cohort" run --nproc-per-node 2 --run-dir "$root/run-$1" \
    --no-dashboard -- build/examples/gpt/gpt --preset tiny --data "$2" --phase-times --steps "$steps" \
    --eval-windows 2 --sample-tokens 0 --log-every 0 ${GPT_ARGS:-}
}

if [ "$only" != memory ]; then
  rm -rf "$root/fortunes-bytes" "$root/fortunes-spm"
  "$cohort" data prepare /usr/share/games/fortunes --tokenizer bytes --out "$root/fortunes-bytes" 2>/dev/null
  "$cohort" data prepare /usr/share/games/fortunes --vocab 8000 --out "$root/fortunes-spm" 2>/dev/null
  echo "data_gpt: wait, fortunes, bytes tokenizer"
  run_gpt wait-bytes "$root/fortunes-bytes"
  echo "data_gpt: wait, fortunes, SentencePiece 8000"
  run_gpt wait-spm "$root/fortunes-spm"
fi
if [ "$only" != wait ]; then
  small="$root/small-10mib" large="$root/large-${gib}gib"
  [ -f "$small/manifest.json" ] || build/bench/data_peers --dir "$small" --generate "$(awk 'BEGIN { print 10 / 1024 }')" --shard-mib 4
  if [ ! -f "$large/manifest.json" ]; then
    rm -rf "$large"
    t0=$(date +%s)
    build/bench/data_peers --dir "$large" --generate "$gib"
    echo "data_gpt: generated $(du -sh "$large" | cut -f1) in $(($(date +%s) - t0)) s"
  fi
  echo "data_gpt: memory, 10 MiB data set"
  run_gpt memory-10mib "$small"
  echo "data_gpt: memory, $gib GiB data set ($(du -sb "$large" | awk '{ printf "%.1f GB", $1 / 1e9 }'))"
  run_gpt "memory-${gib}gib" "$large"
fi
echo "data_gpt: load average $(cut -d' ' -f1-3 /proc/loadavg) (the machine's other work slows the steps)"
