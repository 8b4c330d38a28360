#!/usr/bin/env bash
# docs_code_test.sh CXX FLAGS_FILE SOURCE_DIR: every ```cpp block of README.md and docs/**/*.md
# compiles as C++17 (-pedantic-errors, syntax only) against cohort's headers. A block is the body
# of a function of its own, or sits at namespace scope where it defines functions or types
# (`int main() {`, `struct`, ...); its #include lines go to the top. What the blocks leave to the
# reader (a data set, a model, a loader, ...) is declared in docs_context.h. A block that cannot
# compile alone (pseudo-code, a piece of a declaration) says so in its info string, "```cpp
# fragment", which renders like any other; it is skipped and counted. All blocks go into one
# translation unit, as torch's headers take most of a compile; #line points each error at its
# markdown file and line.
set -euo pipefail
cxx="$1" flags_file="$2" src="$3"
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mktemp -d /tmp/cohort-docs-code.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
tu="$dir/docs_blocks.cpp"
cd "$src"
mapfile -t files < <(echo README.md; find docs -name "*.md" | sort)  # docs/ and its subfolders
# One awk pass over all files: block bodies into the TU, includes first, a summary on stderr.
awk -v tu="$tu" -v inc="$dir/includes" '
  function flush(   i, scope, body) {
    scope = "function"
    for (i = 1; i <= n; i++)
      if (lines[i] ~ /^(int|void|auto|bool|double|float) [A-Za-z_][A-Za-z_0-9]*\(.*\)[^;]*$/ || lines[i] ~ /^(struct|class|namespace|template|using|enum) /)
        scope = "namespace"
    blocks++
    printf "namespace docs_block_%d {  // %s:%d\n", blocks, FILENAME, start >> tu
    if (scope == "function") printf "[[maybe_unused]] void block() {\n" >> tu
    for (i = 1; i <= n; i++) {
      if (lines[i] ~ /^[ \t]*#include /) { printf "#line %d \"%s\"\n%s\n", start + i, FILENAME, lines[i] >> inc; continue }
      printf "#line %d \"%s\"\n%s\n", start + i, FILENAME, lines[i] >> tu
    }
    if (scope == "function") printf "}\n" >> tu
    printf "}  // namespace docs_block_%d\n", blocks >> tu
  }
  FNR == 1 { inblock = 0 }
  !inblock && /^[ \t]*```cpp/ {
    if ($0 ~ /fragment/) { skipping = 1; fragments++; printf "  skipped (fragment): %s:%d\n", FILENAME, FNR > "/dev/stderr"; inblock = 1; next }
    skipping = 0; inblock = 1; n = 0; start = FNR; match($0, /^[ \t]*/); indent = RLENGTH; next
  }
  inblock && /^[ \t]*```[ \t]*$/ { inblock = 0; if (!skipping) flush(); next }
  inblock && !skipping { line = $0; lines[++n] = substr(line, 1, indent) ~ /^[ \t]*$/ ? substr(line, indent + 1) : line }
  END { printf "docs_code_test: %d blocks to compile, %d fragments skipped\n", blocks, fragments > "/dev/stderr" }
' "${files[@]}"
touch "$dir/includes"
{ echo "#include \"docs_context.h\""; cat "$dir/includes"; } > "$dir/head.cpp"
cat "$dir/head.cpp" "$tu" > "$dir/all.cpp"
# One flag a line; an empty list leaves a bare -D or -isystem behind. The compiler's own include
# folders go (CMake leaves them out of its commands too): as -isystem they break #include_next.
flags=()
while IFS= read -r flag; do
  case "$flag" in
    "" | -D | -isystem) continue ;;
    -isystem*) case "$(realpath -m "${flag#-isystem}")" in /usr/include | /usr/local/include) continue ;; esac ;;
  esac
  flags+=("$flag")
done < "$flags_file"
# -Wno-return-type: a block's main() is no program's main, so it has no implicit `return 0`.
if ! "$cxx" -std=c++17 -pedantic-errors -fsyntax-only "${flags[@]}" -Wno-return-type -I"$here" "$dir/all.cpp"; then
  echo "docs_code_test: a \`\`\`cpp block above does not compile as C++17; fix it, or mark it \`\`\`cpp fragment if it cannot stand alone"
  exit 1
fi
echo "docs_code_test: every \`\`\`cpp block of README.md and docs/*.md compiles"
