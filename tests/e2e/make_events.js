#!/usr/bin/env node
// Writes a synthetic events.jsonl as `cohort run` writes it (docs/monitoring.md): a start, a
// rendezvous and a round, then per-step metrics of every rank, a straggler from a given step on, a
// checkpoint and the end. Used to test `cohort dashboard` and the page without training anything.
// The straggler event comes at the step the hub's own rule (docs/monitoring.md, "Detection rules")
// flags the rank: `cohort dashboard` replays the log through that rule too, and an event the rule
// disagrees with would be undone at the next step (the page's rank going slow, running, slow).
//   node make_events.js RUN_DIR [--steps N] [--world W] [--slow-rank R --slow-from S]
//                               [--live-ms MS]   (append one step every MS ms, as a running job)
//                               [--fail-at S --resume-from R]  (rank 1 killed at step S, restart from R)
//                               [--nan-at S]  (rank 0's loss NaN at step S, skipped)  [--no-finish]
//                               [--end-at-failure]  (the log ends right after the failure line)
//                               [--no-timeline]  (no "timeline" in the metrics records)
// Each metrics record carries the step's spans (issue 49's "timeline": data, forward, backward,
// comm_wait, optimizer; two buckets from launch to completion, which wait for the slowest rank's
// launch; at step 100 rank 0's checkpoint capture and a slow write, 120 ms; at step --late-bucket
// (default 120) bucket 1's allreduce takes 30 ms on every rank).
'use strict';

const fs = require('fs');
const path = require('path');

function parse(argv) {
  const o = { dir: null, steps: 200, world: 2, slowRank: -1, slowFrom: 50, liveMs: 0, finish: true, failAt: 0, resumeFrom: 100, nanAt: 0, endAtFailure: false, timeline: true, lateBucket: 120 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i];
    if (a === '--steps') o.steps = Number(next());
    else if (a === '--world') o.world = Number(next());
    else if (a === '--slow-rank') o.slowRank = Number(next());
    else if (a === '--slow-from') o.slowFrom = Number(next());
    else if (a === '--live-ms') o.liveMs = Number(next());
    else if (a === '--no-finish') o.finish = false;
    else if (a === '--fail-at') o.failAt = Number(next());
    else if (a === '--resume-from') o.resumeFrom = Number(next());
    else if (a === '--nan-at') o.nanAt = Number(next());
    else if (a === '--end-at-failure') o.endAtFailure = true;
    else if (a === '--no-timeline') o.timeline = false;
    else if (a === '--late-bucket') o.lateBucket = Number(next());
    else if (!o.dir) o.dir = a;
    else throw new Error('unexpected argument ' + a);
  }
  if (!o.dir) throw new Error('usage: make_events.js RUN_DIR [--steps N] [--world W] [--slow-rank R] [--live-ms MS]');
  return o;
}

// The hub's straggler rule with its defaults (window 20, judged once full; factor 1.5 of the other
// ranks' median, and 5 ms more): the straggling rank and its blamed phase, or null.
const STRAGGLER_WINDOW = 20;
const STRAGGLER_FACTOR = 1.5;
const PHASES = ['data', 'forward', 'backward', 'optimizer'];
function median(v) {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
function straggler(windows) {
  if (windows.length < 2 || windows.some((w) => w.length < STRAGGLER_WINDOW)) return null;
  const busy = windows.map((w) => median(w.map((p) => p.busy)));
  for (let r = 0; r < windows.length; r++) {
    const others = median(busy.filter((_, i) => i !== r));
    if (busy[r] > STRAGGLER_FACTOR * others && busy[r] - others >= 0.005) {
      const excess = (ph) => median(windows[r].map((p) => p[ph])) - median(windows.filter((_, i) => i !== r).map((w) => median(w.map((p) => p[ph]))));
      const phase = PHASES.reduce((a, b) => (excess(b) > excess(a) ? b : a));
      return { rank: r, phase, busy_s: busy[r], others_s: others, phase_excess_s: excess(phase) };
    }
  }
  return null;
}

// A step's "timeline" (issue 49): spans [name, cat, start_s, dur_s, args] relative to t0.
function timeline(b, comm, launch, done, t0, checkpoint) {
  const spans = [];
  let at = 0;
  for (const [name, d] of [['data', b.data], ['forward', b.forward], ['backward', b.backward], ['comm_wait', comm], ['optimizer', b.optimizer]]) {
    spans.push([name, 'compute', at, d, null]);
    at += d;
  }
  for (const k of [0, 1]) spans.push(['bucket', 'comm', launch[k], done[k] - launch[k], { index: k, bytes: 850000, algorithm: 'ring' }]);
  if (checkpoint) {
    spans.push(['ckpt_capture', 'io', at, 0.004, { step: 100 }]);
    spans.push(['ckpt_write', 'io', at + 0.004, 0.12, { bytes: 1200000, path: 'step-00000100' }]);
  }
  return { t0, clock_offset_s: 0, clock_error_s: 0.00002, spans };
}

// The lines of one step, every rank; deterministic (a small LCG), loss falling with noise.
function* lines(o) {
  let t = Date.now() / 1000 - (o.liveMs ? 0 : o.steps * 0.03);  // a live log is written now; a whole one ended now
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const ev = (kind, message, fields) => Object.assign({ t, type: 'event', kind, message }, fields || {});
  yield ev('start', 'cohort run: 2 workers on 1 node', { argv: ['fashion_mnist'], nproc: o.world, nnodes: 1, run_dir: o.dir });
  yield ev('rendezvous', 'rendezvous round 0: world size ' + o.world, { round: 0, world_size: o.world, nodes: 1 });
  yield ev('round_started', 'round 0 started with ' + o.world + ' workers', { round: 0, world_size: o.world, restart: 0 });
  let flagged = false;
  let restarts = 0;
  let windows = Array.from({ length: o.world }, () => []);  // each rank's last steps this round
  for (let step = 1; step <= o.steps; step++) {
    const slowNow = o.slowRank >= 0 && step >= o.slowFrom;
    const busy = [];
    for (let r = 0; r < o.world; r++) {
      const extra = slowNow && r === o.slowRank ? 0.08 : 0;
      busy.push({ data: 0.001, forward: 0.008 + extra + rand() * 0.001, backward: 0.012 + rand() * 0.001, optimizer: 0.001 });
    }
    const total = (b) => b.data + b.forward + b.backward + b.optimizer;
    const slowest = Math.max(...busy.map(total));
    busy.forEach((b, r) => {
      windows[r].push(Object.assign({ busy: total(b) }, b));
      if (windows[r].length > STRAGGLER_WINDOW) windows[r].shift();
    });
    t += slowest + 0.004;
    // Buckets: launched mid-backward and at its end; each completes once every rank launched it.
    const lateS = step === o.lateBucket ? 0.03 : 0.0012;
    const launches = busy.map((b) => [b.data + b.forward + b.backward / 2, b.data + b.forward + b.backward]);
    const done = [0, 1].map((k) => Math.max(...launches.map((l) => l[k])) + (k === 1 ? lateS : 0.0012));
    for (let r = 0; r < o.world; r++) {
      const b = busy[r];
      const comm = slowest - total(b) + 0.003;
      const stepS = total(b) + comm;
      const nan = step === o.nanAt && r === 0 && restarts === 0;
      const loss = nan ? 'nan' : 2.3 * Math.exp(-step / 80) + 0.3 + rand() * 0.05;
      yield {
        t, type: 'metrics', rank: r, node: 0, world_size: o.world, restart: restarts, step,
        step_s: stepS, phases: Object.assign({}, b, { comm_wait: comm }),
        samples: 64, samples_per_s: 64 / stepS, grad_norm: nan ? 'nan' : 1 + rand(), rss_bytes: 300e6 + r * 1e6,
        comm_bytes: 1700000, comm_s: 0.003, busbw: 1.2e9, scalars: { loss, lr: 0.01 },
        timeline: o.timeline ? timeline(b, comm, launches[r], done, t - stepS + 0.0002 * r, step === 100 && r === 0) : undefined,
      };
      if (nan) {
        yield ev('anomaly', 'rank 0: loss is NaN at step ' + step + '; the step is skipped (--on-nan skip)',
          { anomaly: 'nan', rank: 0, node: 0, step, policy: 'skip', what: 'loss' });
      }
    }
    const slow = flagged ? null : straggler(windows);
    if (slow) {
      flagged = true;
      const ms = (x) => (x * 1000).toFixed(1);
      yield ev('anomaly', 'rank ' + slow.rank + ' is a straggler: busy ' + ms(slow.busy_s) + ' ms per step vs ' + ms(slow.others_s) +
        ' ms for the other ranks (' + (slow.busy_s / slow.others_s).toFixed(1) + 'x over the last ' + STRAGGLER_WINDOW +
        ' steps); slowest phase: ' + slow.phase,
        { anomaly: 'straggler', rank: slow.rank, node: 0, step, phase: slow.phase, busy_s: slow.busy_s, others_s: slow.others_s, phase_excess_s: slow.phase_excess_s });
    }
    if (step === 100) yield ev('checkpoint_saved', 'checkpoint step-00000100 committed (1.2 MB, 0.05 s)', { rank: 0, step });
    if (step === o.failAt && restarts === 0) {
      restarts = 1;
      t += 0.5;
      yield ev('failure', 'rank 1 (node 0, pid 4242) was killed by signal 9 (SIGKILL: Killed)',
        { rank: 1, node: 0, local_rank: 1, pid: 4242, round: 0, reason: 'was killed by signal 9 (SIGKILL: Killed)' });
      if (o.endAtFailure) return;
      yield ev('restart', 'restarting the workers (restart 1 of 3)', { restarts: 1, reason: 'rank 1 failed' });
      t += 1;
      yield ev('round_started', 'round 1 started with ' + o.world + ' ranks', { round: 1, world_size: o.world, restart: 1 });
      windows = windows.map(() => []);  // the hub's windows start again with the round
      flagged = false;
      yield ev('checkpoint_restored', 'checkpoint step-' + String(o.resumeFrom).padStart(8, '0') + ' restored', { rank: 0, step: o.resumeFrom });
      step = o.resumeFrom;
    }
  }
  if (o.finish) yield ev('finished', 'job succeeded', { exit_code: 0, state: 'succeeded' });
}

async function main() {
  const o = parse(process.argv.slice(2));
  fs.mkdirSync(o.dir, { recursive: true });
  const file = path.join(o.dir, 'events.jsonl');
  if (!o.liveMs) {
    fs.writeFileSync(file, [...lines(o)].map((l) => JSON.stringify(l)).join('\n') + '\n');
    return;
  }
  fs.writeFileSync(file, '');
  for (const l of lines(o)) {
    fs.appendFileSync(file, JSON.stringify(l) + '\n');
    if (l.type === 'metrics' && l.rank === o.world - 1) await new Promise((r) => setTimeout(r, o.liveMs));
  }
}

main().catch((e) => {
  console.error('make_events: ' + e.message);
  process.exit(1);
});
