#!/usr/bin/env bash
# Runs each fuzz harness of cohort's parsers (fuzz/: manifests, safetensors headers, sampler
# states, agent messages and their authenticated framing, worker datagrams, event logs) for
# SECONDS (default 30; CI runs 30), FUZZ_JOBS at a time (default 2, one per core here; CI runs all
# seven at once to keep its time short), with AddressSanitizer and UBSan. Seeds come from
# fuzz/corpus/<harness>/; what the fuzzer finds grows build-fuzz/corpus/<harness>/ (kept between
# runs), a crash lands in build-fuzz/crashes/ and fails the script. Prints one line per harness: runs, seconds, coverage, and whether it crashed.
#   [FUZZ_JOBS=N] [FUZZ_HARNESSES="NAME..."] bash bench/fuzz.sh [SECONDS]
# SECONDS 0 only builds the harnesses (CI builds them beside a test suite, then fuzzes).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
jobs="${FUZZ_JOBS:-2}"
case "$seconds$jobs" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS and FUZZ_JOBS must be whole numbers ('$seconds', '$jobs')" >&2; exit 2 ;; esac
[ "$jobs" -ge 1 ] || { echo "fuzz.sh: FUZZ_JOBS must be at least 1" >&2; exit 2; }

# clang-14 and libFuzzer from Debian (scripts/setup-test-tools.sh installs them too).
bash scripts/apt-install-missing.sh fuzz.sh clang-14 libfuzzer-14-dev
COHORT_SETUP_NO_BUILD=1 bash scripts/setup.sh  # nlohmann-json, spdlog, xxhash headers

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Quiet unless it fails: then the build's own output says why (ninja prints errors on stdout).
build_log=$(mktemp)
cmake --build build-fuzz >"$build_log" 2>&1 || { cat "$build_log" >&2; rm -f "$build_log"; echo "fuzz.sh: the harnesses do not build" >&2; exit 1; }
rm -f "$build_log"
[ "$seconds" -gt 0 ] || { echo "fuzz: harnesses built in build-fuzz"; exit 0; }

harnesses=(manifest safetensors_header sampler_state agent_message channel_frames worker_datagram event_log file_blob data_manifest)
# FUZZ_HARNESSES="a b" runs only those (e.g. the new ones, for their first long run).
[ -n "${FUZZ_HARNESSES:-}" ] && read -r -a harnesses <<<"$FUZZ_HARNESSES"
mkdir -p build-fuzz/crashes build-fuzz/logs
run_one() {
  local h="$1"
  mkdir -p "build-fuzz/corpus/$h"
  # -timeout: one input taking 10 s is a finding (a hang); -rss_limit_mb: so is 2 GiB of memory.
  ASAN_OPTIONS=detect_leaks=1 "build-fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$h-" "build-fuzz/corpus/$h" "fuzz/corpus/$h" \
    >"build-fuzz/logs/$h.log" 2>&1
}
status=0
for ((i = 0; i < ${#harnesses[@]}; i += jobs)); do
  pids=()
  for h in "${harnesses[@]:i:jobs}"; do run_one "$h" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
done
for h in "${harnesses[@]}"; do
  log="build-fuzz/logs/$h.log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if grep -q -E "ERROR: (AddressSanitizer|libFuzzer)|runtime error:|deadly signal" "$log"; then
    echo "fuzz: $h CRASHED after ${runs:-?} runs; see $log and build-fuzz/crashes/"
    grep -m 3 -E "ERROR|runtime error|SUMMARY" "$log" | sed 's/^/fuzz:   /'
    status=1
  else
    echo "fuzz: $h: ${runs:-?} runs in ${seconds} s, ${cov:-cov: ?}, no crash"
  fi
done
exit $status
