#!/usr/bin/env bash
# The house rules of the source tree (docs/ARCHITECTURE.md, "Layers" and "Conventions"), checked on
# the files git tracks:
#   1. no source file over 500 lines;
#   2. no folder with more than 15 files (include/cohort/ excepted: its paths are what users write,
#      and fuzz/corpus/ holds seed inputs, not source);
#   3. no include from a lower layer of src/ to a higher one (the layer table below is the one in
#      docs/ARCHITECTURE.md);
#   4. no empty file at the root.
# Usage: layout_test.sh [REPO_ROOT]. Prints each violation and exits 1 if there is one.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
fail=0
problem() { echo "layout: $*"; fail=1; }

sources=$(git ls-files -- '*.cpp' '*.h' '*.hpp' '*.js' '*.py' '*.sh' '*.cmake' 'CMakeLists.txt' '.ci/run')
for f in $sources; do
  n=$(wc -l <"$f")
  [ "$n" -le 500 ] || problem "$f has $n lines (at most 500)"
done

while read -r count dir; do
  case "$dir" in include/cohort | fuzz/corpus/*) continue ;; esac
  [ "$count" -le 15 ] || problem "$dir/ holds $count files (at most 15)"
done < <(git ls-files | grep / | sed 's|/[^/]*$||' | sort | uniq -c)

for f in $(git ls-files | grep -v / ); do
  [ -s "$f" ] || problem "$f at the root is empty"
done

# Layers of src/ (docs/ARCHITECTURE.md): a folder may include its own layer and those below.
declare -A layer=([runtime]=0 [data]=1 [optim]=1 [monitor]=1 [hub]=1 [parallel]=2 [checkpoint]=2
                  [dashboard]=3 [sim]=3 [launcher]=4)
for f in $(git ls-files 'src/*.cpp' 'src/*.h'); do
  from=$(echo "$f" | cut -d/ -f2)
  [ -n "${layer[$from]+x}" ] || continue
  while read -r inc; do
    to=${inc%%/*}
    [ -n "${layer[$to]+x}" ] || continue
    [ "${layer[$to]}" -le "${layer[$from]}" ] ||
      problem "$f (layer ${layer[$from]}, $from) includes $inc (layer ${layer[$to]}, $to)"
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f")
done

[ "$fail" = 0 ] && echo "layout: every file, folder and include keeps the rules"
exit "$fail"
