#!/usr/bin/env bash
# Builds cohort with a sanitizer into its own folder and runs tests there (issue 22):
#   bash scripts/sanitize.sh asan [CTEST ARGS...]  AddressSanitizer + UBSan, all of cohort (the library,
#                                                  the launcher, the examples, the tests) in build-asan/;
#                                                  runs the unit and process tests (not the browser ones)
#   bash scripts/sanitize.sh tsan [CTEST ARGS...]  ThreadSanitizer, all of cohort in build-tsan/; the
#                                                  same tests (the gradient reducer, the checkpoint
#                                                  writers, the hub, the dashboard, the agents)
# Extra arguments go to ctest (e.g. -R Launcher). A report fails the test it happens in, and so the run.
#
# Only cohort is instrumented: Debian's libtorch, Gloo and OpenBLAS are not. So leak checking is off
# (libtorch keeps allocations to the end on purpose), UBSan's vptr check is off (it would judge
# libtorch's classes by type information it cannot see), and TSan does not judge what those
# libraries do through its interceptors (ignore_noninstrumented_modules: their atomics, which order
# it, are invisible to it); suppressions, if ever needed, go in scripts/tsan.supp with their reason.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
shift || true
case "$kind" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
    # Two kinds of test measure memory itself, which ASan changes on purpose: MemoryReuse (freed
    # memory handed out again without page faults; ASan keeps freed memory in quarantine) and
    # ShardedMemory (training under a memory limit; ASan's allocator and shadow need more).
    tests=(-LE "e2e|cuda" -E "^(MemoryReuse|ShardedMemory)[.]")
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp:${TSAN_OPTIONS:-}"
    # As under ASan, the tests that measure memory; and two that start a probe with an empty
    # environment (env -i), which takes TSAN_OPTIONS away from it.
    tests=(-LE "e2e|cuda" -E "^(MemoryReuse|ShardedMemory)[.]|^Init[.](WithoutVariablesIsAWorldOfOne|SaysHowToStartWithOpenBlasKernelsForThisCpu)$")
    ;;
  *)
    echo "usage: bash scripts/sanitize.sh asan|tsan [CTEST ARGS...]" >&2
    exit 2
    ;;
esac
dir=build-$kind
COHORT_SETUP_NO_BUILD=1 bash scripts/setup.sh
# Release optimisation keeps the instrumented tests within their timeouts; -g for readable reports.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
  ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH"} >/dev/null
cmake --build "$dir"
[ $# -gt 0 ] && tests=("$@")
ctest --test-dir "$dir" --output-on-failure --timeout 900 --parallel "${COHORT_TEST_JOBS:-2}" "${tests[@]}"
