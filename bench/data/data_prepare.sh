#!/usr/bin/env bash
# data_prepare.sh [MB]: `cohort data prepare`'s speed (issue 46: >= 50 MB/s per core, scaling
# across cores) on MB MB (default 100) of distinct real text: the fortunes, then the Debian
# documentation and manual pages of this machine (/usr/share/doc, /usr/share/man, gunzipped), one
# file per source file, each content once (duplicates by hash and binary files left out). Times
# prepare with the bytes tokenizer and with a SentencePiece BPE model (--vocab 8000, trained once on
# the corpus first, its training timed apart) at 1 thread and at every core count up to nproc;
# prints one JSON line per run: {"tokenizer","threads","mb","s","mb_per_s","mb_per_s_per_core"}.
# Everything goes under ${DATA_BENCH_DIR:-/var/tmp/cohort-prepare-bench}, removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
mb="${1:-100}"
root="${DATA_BENCH_DIR:-/var/tmp/cohort-prepare-bench}"
cohort=build/tools/cohort
trap 'rm -rf "$root"' EXIT
rm -rf "$root" && mkdir -p "$root/corpus"

python3 - "$root/corpus" "$mb" <<'EOF'
import gzip, hashlib, os, sys
out, limit = sys.argv[1], int(float(sys.argv[2]) * 1e6)
seen, total, n = set(), 0, 0
def sources():
    for top in ["/usr/share/games/fortunes", "/usr/share/doc", "/usr/share/man"]:
        for d, dirs, files in os.walk(top):
            dirs.sort()
            for f in sorted(files):
                yield os.path.join(d, f)
for path in sources():
    if total >= limit:
        break
    if os.path.islink(path) or path.endswith(".dat"):
        continue
    try:
        data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except (OSError, EOFError):
        continue
    h = hashlib.sha1(data).digest()
    if not data or b"\0" in data[:65536] or h in seen:
        continue
    seen.add(h)
    data = data[: limit - total]
    with open(os.path.join(out, "%06d.txt" % n), "wb") as f:
        f.write(data)
    total, n = total + len(data), n + 1
print("data_prepare: corpus %.1f MB in %d distinct files" % (total / 1e6, n), file=sys.stderr)
EOF
bytes=$(find "$root/corpus" -type f -printf '%s\n' | awk '{ n += $1 } END { print n }')

t0=$(date +%s.%N)
"$cohort" data prepare "$root/corpus" --vocab 8000 --out "$root/spm-trained" >"$root/log" 2>&1 || { cat "$root/log"; exit 1; }
t1=$(date +%s.%N)
echo "data_prepare: SentencePiece --vocab 8000 trained and the corpus prepared in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
model=$(ls "$root"/spm-trained/*.model | head -1)
cp "$model" "$root/tokenizer.model"

for tok in bytes "$root/tokenizer.model"; do
  name=$([ "$tok" = bytes ] && echo bytes || echo sentencepiece)
  for threads in $(seq 1 "$(nproc)"); do
    rm -rf "$root/out"
    t0=$(date +%s.%N)
    "$cohort" data prepare "$root/corpus" --tokenizer "$tok" --threads "$threads" --out "$root/out" >"$root/log" 2>&1 || { cat "$root/log"; exit 1; }
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v n="$bytes" -v t="$threads" -v k="$name" 'BEGIN {
      s = b - a; r = n / 1e6 / s
      printf "{\"tokenizer\":\"%s\",\"threads\":%d,\"mb\":%.1f,\"s\":%.2f,\"mb_per_s\":%.1f,\"mb_per_s_per_core\":%.1f}\n", k, t, n / 1e6, s, r, r / t }'
  done
done
echo "data_prepare: load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine lowers these)"
