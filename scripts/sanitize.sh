#!/usr/bin/env bash
# Builds cohort with a sanitizer into its own folder and runs tests there (issue 22):
#   bash scripts/sanitize.sh asan [CTEST ARGS...]  AddressSanitizer + UBSan, all of cohort (the library,
#                                                  the launcher, the examples, the tests) in build-asan/;
#                                                  runs the unit and process tests (not the browser ones)
#   bash scripts/sanitize.sh tsan [CTEST ARGS...]  ThreadSanitizer in build-tsan/, for the threaded
#                                                  parts without libtorch: the hub, the dashboard,
#                                                  the agents' channels (see below for the others)
# Extra arguments go to ctest (e.g. -R Launcher). A report fails the test it happens in, and so the run.
#
# Only cohort is instrumented: Debian's libtorch, Gloo and OpenBLAS are not. So leak checking is off
# (libtorch keeps allocations to the end on purpose), UBSan's vptr check is off (it would judge
# libtorch's classes by type information it cannot see), and TSan runs only the tests above;
# suppressions for reports inside uninstrumented libraries go in scripts/tsan.supp, each with its
# reason.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
shift || true
targets=()
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
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp:${TSAN_OPTIONS:-}"
    # The torch-free threaded parts only. A TSan binary that loads Debian's libtorch 1.13 dies in
    # the dynamic loader before main (a segfault while relocating, in elf_machine_lazy_rel), so the
    # gradient reducer and the checkpoint writer, which live in libcohort.so with libtorch, cannot
    # run under TSan here (docs/BENCHMARKS.md#sanitizers).
    tests=(-R "^(Hub|ChannelDroppable|DashboardServer|LauncherAuth|LauncherMessages)")
    targets=(--target cohort_hub_tests cohort_dashboard_server_tests cohort_launcher_parts_test)
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
cmake --build "$dir" "${targets[@]}"
[ $# -gt 0 ] && tests=("$@")
ctest --test-dir "$dir" --output-on-failure --timeout 900 --parallel "${COHORT_TEST_JOBS:-2}" "${tests[@]}"
