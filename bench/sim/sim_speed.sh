#!/usr/bin/env bash
# The simulator's speed (issue 17): one simulated hour of a 10,000-worker job (1,250 nodes x 8,
# every step and every worker, compute noise on) on one core — natively (`cohort sim run`) and in
# WebAssembly under Node.js (the page's core, build/web-sim/assets/sim_core.js) — and the page's
# frames per second with 1,000 workers running in headless Chromium (bench/sim/sim_page_fps.js).
#   usage: [COHORT_BUILD=build] bench/sim/sim_speed.sh [ROUNDS (3)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
build=${COHORT_BUILD:-build}
cli=$build/tools/cohort
core=$build/web-sim/assets/sim_core.js
[ -x "$cli" ] || { echo "sim_speed: build first (ninja -C $build)" >&2; exit 2; }
job=(--set nodes=1250 --set workers_per_node=8 --set params=1e9 --set forward_s=0.3 --set backward_s=0.6
     --set optimizer_s=0.05 --set compute_cv=0.05 --set algorithm=tree --set inter_bw=50e9 --set intra_bw=150e9
     --set hours=1 --set timeline_workers=32)
for r in $(seq "$rounds"); do
  start=$(date +%s.%N)
  steps=$(taskset -c 0 "$cli" sim run "${job[@]}" --no-series | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["steps_run"])')
  end=$(date +%s.%N)
  echo "native round $r: $(python3 -c "print(f'{$end-$start:.3f}')") s for 1 simulated hour of 10,000 workers ($steps steps, $((steps * 10000)) worker-steps)"
done
node_bin=""
for d in "${XDG_CACHE_HOME:-$HOME/.cache}"/cohort/venv-test-tools/lib/python3*/site-packages/playwright/driver; do [ -x "$d/node" ] && node_bin="$d/node"; done
[ -n "$node_bin" ] || node_bin=$(command -v node || true)
if [ -f "$core" ] && [ -n "$node_bin" ]; then
  for r in $(seq "$rounds"); do
    taskset -c 0 "$node_bin" -e '
      const core = require(process.argv[1]);
      core().then((m) => {
        const call = (f, ...a) => JSON.parse(m.ccall(f, "string", a.map((x) => typeof x === "number" ? "number" : "string"), a));
        const p = Object.assign(call("sim_schema").defaults, { nodes: 1250, workers_per_node: 8, params: 1e9, forward_s: 0.3,
          backward_s: 0.6, optimizer_s: 0.05, compute_cv: 0.05, algorithm: "tree", inter_bw: 50e9, intra_bw: 150e9, hours: 1 });
        call("sim_start", JSON.stringify(p));
        const t0 = process.hrtime.bigint();
        const r = call("sim_advance", 3600, 0);
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        console.log("wasm round " + process.argv[2] + ": " + s.toFixed(3) + " s for 1 simulated hour of 10,000 workers (" + r.totals.steps_run + " steps)");
      });' "$(realpath "$core")" "$r"
  done
else
  echo "wasm: skipped (no $core or no node)"
fi
if [ -f "$build/web-sim/index.html" ]; then
  COHORT_SIM_PAGE="$build/web-sim" tests/e2e/node.sh bench/sim/sim_page_fps.js
fi
