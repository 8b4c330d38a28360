#!/usr/bin/env bash
# check-downstream.sh [BUILD_DIR] [WAYS...]: uses cohort the way another project does
# (examples/downstream/), from a build of cohort (default build/), each way built and run on 2 ranks
# under `cohort run`, its result lines checked:
#   prefix     cmake --install into a temporary prefix; find_package(cohort) from there
#   pkgconfig  the same install, compiled with g++ and `pkg-config --cflags --libs cohort`
#   refuse     find_package(cohort) next to another libtorch major.minor (the pip wheel's
#              libtorch 2.x, scripts/setup-torch2.sh): configuring must fail with cohort's message
#   deb        cpack's .deb, installed with apt-get (root), then find_package from /usr; removed after
#   subdir     add_subdirectory(cohort's source tree), then FetchContent from the same tree (into the
#              same binary folder, so the second adds no compilation)
# Default: all of them. CI runs it (.ci/run); each way takes its own temporary folder.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"; shift || true
ways=("$@"); [ ${#ways[@]} -gt 0 ] || ways=(prefix pkgconfig refuse deb subdir)
work="$(mktemp -d /tmp/cohort-downstream.XXXXXX)"
src="$repo/examples/downstream"
deb_installed=0
cleanup() {
  if [ "$deb_installed" = 1 ]; then apt-get remove -y -q cohort >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { echo "check-downstream: $*"; }
fail() { echo "check-downstream: FAILED: $*" >&2; exit 1; }

# run_two COHORT PROGRAM: 2 ranks; every rank prints a result line; they must agree and have learned.
run_two() {
  local out="$work/run.out"
  "$1" run --nproc-per-node 2 --threads-per-proc 1 -- "$2" >"$out" 2>&1 || { cat "$out"; fail "$2 on 2 ranks exited with $?"; }
  python3 - "$out" <<'PY' || { cat "$out"; fail "result lines of $2"; }
import json, re, sys
rows = [json.loads(m) for m in re.findall(r'\{"rank".*\}', open(sys.argv[1]).read())]
assert sorted(r["rank"] for r in rows) == [0, 1], rows
assert all(r["world_size"] == 2 and r["steps"] == 16 for r in rows), rows
assert len({r["param_checksum"] for r in rows}) == 1, "ranks' parameters differ: %s" % rows
assert all(r["loss"] < r["first_loss"] / 4 for r in rows), "did not learn: %s" % rows
print("check-downstream:   2 ranks, %d steps, loss %.4f -> %.4f, parameters %s on both" %
      (rows[0]["steps"], rows[0]["first_loss"], rows[0]["loss"], rows[0]["param_checksum"]))
PY
}

configure_and_build() {  # DIR CMAKE_ARGS...
  local dir="$1"; shift
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; fail "configure $dir"; }
  cmake --build "$dir" --target downstream_train >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "build $dir"; }
}

prefix="$work/prefix"
install_prefix() { [ -d "$prefix" ] || cmake --install "$build" --prefix "$prefix" >/dev/null; }

for way in "${ways[@]}"; do
  case "$way" in
    prefix)
      say "prefix: cmake --install, find_package(cohort) with CMAKE_PREFIX_PATH=$prefix"
      install_prefix
      configure_and_build "$work/prefix-build" -DCMAKE_PREFIX_PATH="$prefix"
      run_two "$prefix/bin/cohort" "$work/prefix-build/downstream_train" ;;
    pkgconfig)
      say "pkgconfig: g++ \$(pkg-config --cflags --libs cohort)"
      install_prefix
      flags="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs cohort)" || fail "pkg-config cohort"
      # shellcheck disable=SC2086
      g++ -O2 "$src/main.cpp" -o "$work/pc_train" $flags || fail "compile with pkg-config's flags"
      run_two "$prefix/bin/cohort" "$work/pc_train" ;;
    refuse)
      venv="${COHORT_TORCH2_VENV:-$HOME/.cache/cohort/venv-torch2}"
      if [ ! -x "$venv/bin/python" ]; then
        [ "${COHORT_E2E_REQUIRED:-0}" = 1 ] && fail "refuse: no libtorch 2.x venv at $venv (scripts/setup-torch2.sh)"
        say "refuse: skipped, no libtorch 2.x venv at $venv"; continue
      fi
      install_prefix
      torch2="$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
      say "refuse: find_package(cohort) beside the libtorch of $torch2"
      mkdir -p "$work/refuse"
      if cmake -S "$src" -B "$work/refuse" -G Ninja -DCMAKE_PREFIX_PATH="$torch2;$prefix" >"$work/refuse.log" 2>&1; then
        cat "$work/refuse.log"; fail "configured against another libtorch major.minor"
      fi
      grep -q "was built against libtorch" "$work/refuse.log" || { cat "$work/refuse.log"; fail "refuse: not cohort's message"; }
      say "  refused: $(grep -o 'cohort [0-9.]* was built against libtorch [^ ]*, but this project' "$work/refuse.log" | head -1)" ;;
    deb)
      [ "$(id -u)" = 0 ] || { [ "${COHORT_E2E_REQUIRED:-0}" = 1 ] && fail "deb: needs root (apt-get install)"; say "deb: skipped, needs root"; continue; }
      say "deb: cpack -G DEB, apt-get install ./cohort_*.deb"
      (cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
      pkg="$(ls "$work"/cohort_*.deb)"
      dpkg-deb -f "$pkg" Depends | sed 's/^/check-downstream:   Depends: /'
      deb_installed=1
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install $pkg"; }
      configure_and_build "$work/deb-build"
      run_two /usr/bin/cohort "$work/deb-build/downstream_train"
      apt-get remove -y -q cohort >/dev/null; deb_installed=0 ;;
    subdir)
      # -O0: the library is compiled again here (a CI minute matters); it trains the same, bitwise.
      say "subdir: add_subdirectory($repo)"
      configure_and_build "$work/subdir-build" -DCOHORT_SOURCE_DIR="$repo" -DCMAKE_CXX_FLAGS_RELEASE=-O0
      grep -q "downstream: cohort through add_subdirectory" "$work/subdir-build.log" || fail "add_subdirectory was not used"
      run_two "$build/tools/cohort" "$work/subdir-build/downstream_train"
      say "subdir: FetchContent(SOURCE_DIR $repo), same binary folder"
      configure_and_build "$work/subdir-build" -DCOHORT_SOURCE_DIR= -DCOHORT_FETCH_DIR="$repo"
      grep -q "downstream: cohort through FetchContent" "$work/subdir-build.log" || fail "FetchContent was not used"
      run_two "$build/tools/cohort" "$work/subdir-build/downstream_train" ;;
    *) fail "unknown way '$way' (prefix pkgconfig refuse deb subdir)" ;;
  esac
done
say "all passed (${ways[*]})"
