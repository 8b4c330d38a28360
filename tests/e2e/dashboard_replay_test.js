#!/usr/bin/env node
// `cohort dashboard RUN_DIR` in a real browser, on a synthetic event log (make_events.js) that
// grows while the page is open: the page shows both ranks, advances its step counter and loss
// chart without reloading, flags the slowed rank, and keeps to its own origin and CSP. Then with a
// token, and the command's errors. No training: runs in seconds, needs only the `cohort` binary.
'use strict';

const fs = require('fs');
const path = require('path');
const t = require('./lib');
const { timelineInfo, clickSpan } = require('./timeline_checks');
const { assert } = t;
const TIMELINE = 'window.cohortDashboard.timeline.view';

const cohort = t.env('COHORT_CLI');
const makeEvents = path.join(__dirname, 'make_events.js');

async function fixture(tag, args) {
  const dir = t.tempDir(tag);
  const gen = t.start(tag + '-events', process.execPath, [makeEvents, dir, ...args]);
  if (!args.includes('--live-ms')) {
    const r = await t.exitOf(gen, 30000);
    assert.strictEqual(r.code, 0, 'make_events failed: ' + gen.err);
  } else {
    await t.waitFor('events.jsonl', () => fs.existsSync(path.join(dir, 'events.jsonl')), 10000, 20);
  }
  return { dir, gen };
}

function assertCleanPage(page, origin) {
  assert.deepStrictEqual(page.problems, [], 'console errors, page errors or CSP violations');
  const foreign = page.requests.filter((u) => !u.startsWith(origin) && !u.startsWith('data:'));
  assert.deepStrictEqual(foreign, [], 'requests beyond the dashboard origin');
}

async function followsAGrowingLog() {
  // 400 steps of 2 ranks, one step every 40 ms; rank 1 slowed (forward +80 ms) from step 150.
  const { dir, gen } = await fixture('follow', ['--steps', '400', '--live-ms', '40', '--slow-rank', '1', '--slow-from', '150']);
  const dash = t.start('follow-dashboard', cohort, ['dashboard', dir]);
  const url = await t.printedUrl(dash);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    await page.evaluate(() => {
      window.__sameDocument = 'yes';
      // Every state rank 1 shows, in order: once flagged it must stay slow (the log's rank stays slow).
      window.__rank1States = [];
      const seen = () => {
        const el = document.querySelector('#ranks [data-rank="1"]');
        const st = el ? el.dataset.state : undefined;
        if (st && st !== window.__rank1States[window.__rank1States.length - 1]) window.__rank1States.push(st);
      };
      new MutationObserver(seen).observe(document.getElementById('ranks'), { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
      seen();
    });
    const first = await t.pageNumbers(page);
    await t.waitFor('both ranks on the page', async () => (await t.pageNumbers(page)).ranks.length === 2, 10000);
    assert.strictEqual((await t.pageNumbers(page)).worldSize, '2');

    // The step counter and the loss chart advance without a reload.
    const later = await t.waitFor('the step counter and the loss chart to advance', async () => {
      const n = await t.pageNumbers(page);
      return n.step >= first.step + 40 && n.points >= first.points + 40 ? n : null;
    }, 30000);
    assert.strictEqual(await page.evaluate(() => window.__sameDocument), 'yes', 'the page reloaded');
    assert.strictEqual(later.navigations, 1);
    assert.strictEqual(later.chartPoints, later.points, 'data-points mirrors the chart');
    console.log('  step ' + first.step + ' -> ' + later.step + ', loss points ' + first.points + ' -> ' + later.points);

    // The slowed rank is flagged, with its slow phase, and the straggler event is listed.
    await t.waitFor('rank 1 flagged slow', () => page.$('#ranks [data-rank="1"][data-state="slow"]'), 30000);
    // One reading of the grid (the page may redraw between separate reads).
    const grid = await page.$$eval('#ranks [data-rank]', (els) => els.map((e) => ({
      rank: e.dataset.rank, state: e.dataset.state, phase: e.dataset.slowPhase || null, note: e.querySelector('.rank-note').textContent })));
    const r1 = grid.find((g) => g.rank === '1');
    assert.strictEqual(r1.state, 'slow', JSON.stringify(grid));
    assert.strictEqual(r1.phase, 'forward', JSON.stringify(grid));
    assert.match(r1.note, /straggler: forward slow/);
    assert.notStrictEqual(grid.find((g) => g.rank === '0').state, 'slow', JSON.stringify(grid));
    await t.waitFor('the straggler event in the timeline', () => page.$('#events li[data-kind="anomaly"][data-anomaly="straggler"][data-severity="warn"]'), 10000);
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-replay-straggler.png'), fullPage: true });
    await timelineShowsTheStraggler(page);

    // The end of the log: every step shown, the job's final state.
    await t.exitOf(gen, 60000);
    await t.waitFor('the final step and state', async () => {
      const n = await t.pageNumbers(page);
      return n.step === 400 && n.jobState === 'succeeded' ? n : null;
    }, 15000);
    assert.strictEqual(await page.evaluate(() => window.__sameDocument), 'yes', 'the page reloaded');
    // Rank 1 never went back to running once flagged (a straggler event the replayed rule
    // disagrees with is undone at the next step: slow, running, slow).
    const states = await page.evaluate(() => window.__rank1States);
    const flaggedAt = states.indexOf('slow');
    assert.ok(flaggedAt >= 0 && states.slice(flaggedAt).every((st) => st === 'slow' || st === 'finished'),
      'rank 1 states on the page: ' + states.join(' -> '));
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-replay.png'), fullPage: true });
    assertCleanPage(page, new URL(url).origin);
  } finally {
    await browser.close();
  }
  const r = await t.stop(dash, 'SIGINT');
  assert.strictEqual(r.code, 0, 'cohort dashboard exits 0 on SIGINT: ' + dash.err);
}

// The timeline panel (issue 49) on the growing log once rank 1 is slowed: the last 10 steps of
// both ranks, rank 1's forward the long span (outlined) while rank 0 waits, its details on a
// click; then it follows the log without a reload, and "last 20 steps" draws 20.
async function timelineShowsTheStraggler(page) {
  const steps = (info, lane) => new Set(info.drawn.filter((d) => lane === undefined || d.lane === lane).map((d) => d.step));
  const info = await t.waitFor('the timeline with 10 steps of both ranks', async () => {
    const i = await timelineInfo(page, TIMELINE);
    return i && i.lanes.length === 2 && steps(i, 0).size === 10 && steps(i, 1).size === 10 ? i : null;
  }, 10000);
  assert.deepStrictEqual(info.lanes.map((l) => l.label), ['rank 0', 'rank 1']);
  assert.ok(info.painted > 5000, 'the canvas is painted: ' + info.painted);
  for (const name of ['data', 'forward', 'backward', 'comm_wait', 'optimizer', 'bucket']) assert.ok(info.legend.includes(name), 'legend: ' + name);
  const newest = Math.max(...steps(info));
  const busy = info.drawn.filter((d) => d.cat === 'compute' && d.name !== 'comm_wait' && d.step === newest);
  const longest = busy.reduce((a, b) => (b.dur > a.dur ? b : a));
  assert.strictEqual(longest.lane, 1, 'the longest busy span is the straggler\'s: ' + JSON.stringify(longest));
  assert.strictEqual(longest.name, 'forward');
  assert.ok(longest.dur > 0.08 && longest.outlier > 2, 'rank 1\'s forward: ' + JSON.stringify(longest));
  const wait0 = info.drawn.find((d) => d.lane === 0 && d.name === 'comm_wait' && d.step === newest);
  assert.ok(wait0 && wait0.dur > 0.06, 'rank 0 waits for it: ' + JSON.stringify(wait0));
  assert.ok(!info.drawn.some((d) => d.lane === 0 && d.cat === 'compute' && d.outlier), 'no busy span of rank 0 outlined');
  // Rank 0's buckets waited for rank 1's late launches: long on rank 0 only, a symptom, not framed.
  assert.deepStrictEqual(info.drawn.filter((d) => d.name === 'bucket' && d.outlier), [], 'no bucket outlined');
  const details = await clickSpan(page, longest);
  assert.strictEqual(details.name, 'forward');
  assert.strictEqual(details.lane, '1');
  assert.strictEqual(details.step, String(newest));
  assert.strictEqual(details.fields.rank, 'rank 1');
  assert.match(details.fields.duration, /^8\d\.\d\d ms \(\d+\.\d× the usual forward\)$/);
  assert.match(details.fields.start, /^\+1\.00 ms into the step$/, 'after the 1 ms of data');
  await page.locator('.timeline-panel').screenshot({ path: path.join(t.artifactsDir(), 'dashboard-replay-timeline.png') });
  console.log('  timeline: ' + info.drawn.length + ' spans, steps ' + Math.min(...steps(info)) + '..' + newest + ', rank 1 forward ' + details.fields.duration);
  await t.waitFor('the timeline following the log', async () => Math.max(...steps(await timelineInfo(page, TIMELINE))) > newest + 5, 15000);
  await page.selectOption('#timeline-steps', '20');
  await t.waitFor('20 steps on the timeline', async () => steps(await timelineInfo(page, TIMELINE), 1).size === 20, 5000);
}

// A finished run opened afterwards: its last 20 steps come from /api/state (the hub keeps them),
// with rank 0's checkpoint at step 100 (a 120 ms write) and the late bucket of step 105 visible;
// the zoom buttons and the wheel narrow the view, "fit" restores it.
async function timelineOfAFinishedRun() {
  const { dir } = await fixture('timeline', ['--steps', '110', '--late-bucket', '105']);
  const dash = t.start('timeline-dashboard', cohort, ['dashboard', dir, '--no-follow']);
  const url = await t.printedUrl(dash);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    await page.selectOption('#timeline-steps', '50');
    const info = await t.waitFor('20 steps of both ranks', async () => {
      const i = await timelineInfo(page, TIMELINE);
      return i && new Set(i.drawn.map((d) => d.step)).size === 20 && i.lanes.length === 2 ? i : null;
    }, 10000);
    assert.deepStrictEqual([...new Set(info.drawn.map((d) => d.step))].sort((a, b) => a - b)[0], 91, 'the hub kept steps 91..110');
    const write = info.drawn.filter((d) => d.name === 'ckpt_write');
    assert.strictEqual(write.length, 1, 'one checkpoint write');
    assert.strictEqual(write[0].lane, 0);
    assert.strictEqual(write[0].cat, 'io');
    assert.ok(info.legend.includes('ckpt_write') && info.legend.includes('ckpt_capture'));
    const late = info.drawn.filter((d) => d.name === 'bucket' && d.outlier);
    assert.deepStrictEqual([...new Set(late.map((d) => d.step + ':' + d.args.index))], ['105:1'], 'the late bucket outlined, on both ranks');
    assert.strictEqual(late.length, 2);
    const details = await clickSpan(page, write[0]);
    assert.strictEqual(details.name, 'ckpt_write');
    assert.strictEqual(details.step, '100');
    assert.strictEqual(details.fields.duration, '120.0 ms');
    assert.strictEqual(details.fields.bytes, '1200000');
    const width = () => page.evaluate((e) => { const v = new Function('return ' + e)(); return v.v1 - v.v0; }, TIMELINE);
    const all = await width();
    await page.click('.tl-zoom[data-zoom="in"]');
    assert.ok(Math.abs(await width() - all / 2) < all * 1e-6, 'zoomed in 2x');
    const box = await page.locator('#timeline').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + 30);
    await page.mouse.wheel(0, 300);
    await t.waitFor('the wheel zooming out', async () => (await width()) > all / 2 * 1.5, 5000);
    await page.click('.tl-zoom[data-zoom="fit"]');
    assert.ok(Math.abs(await width() - all) < all * 1e-6, 'fit shows all again');
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-timeline-checkpoint.png'), fullPage: true });
    assertCleanPage(page, new URL(url).origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
}

// 80 ranks, rank 3 slowed: the view draws 64 of them, and rank 3 (which an even spread over 80
// would leave out: 0, 1, 2, 4, ...) is among them for its outlined forward; the other ranks'
// buckets, long waiting for its launches, are not outlined.
async function manyRanksSampleTheStraggler() {
  const { dir } = await fixture('wide', ['--steps', '30', '--world', '80', '--slow-rank', '3', '--slow-from', '1']);
  const dash = t.start('wide-dashboard', cohort, ['dashboard', dir, '--no-follow']);
  const url = await t.printedUrl(dash);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    const info = await t.waitFor('64 lanes of 10 steps', async () => {
      const i = await timelineInfo(page, TIMELINE);
      return i && i.lanes.length === 64 && new Set(i.drawn.map((d) => d.step)).size === 10 ? i : null;
    }, 15000);
    const ids = info.lanes.map((l) => l.id);
    assert.ok(ids.includes(3), 'rank 3 drawn: ' + ids.join(' '));
    assert.deepStrictEqual(ids, [...ids].sort((a, b) => a - b), 'lanes in rank order');
    assert.strictEqual(ids[ids.length - 1], 79, 'the last rank drawn');
    assert.strictEqual(await page.evaluate((e) => new Function('return ' + e)().picked, TIMELINE), 1);
    assert.match(await page.textContent('.tl-range'), /64 of 80 ranks, 1 with the longest outliers, the rest spread evenly/);
    const framed = info.drawn.filter((d) => d.outlier);
    assert.ok(framed.length >= 10 && framed.every((d) => d.lane === 3 && d.name === 'forward'),
      'only rank 3\'s forwards outlined: ' + JSON.stringify(framed.map((d) => [d.lane, d.name, d.step])));
    assert.strictEqual(info.outliers, framed.length);
    await page.locator('.timeline-panel').screenshot({ path: path.join(t.artifactsDir(), 'dashboard-timeline-80-ranks.png') });
    assertCleanPage(page, new URL(url).origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
}

async function failureRestartAndNan() {
  // A whole run: NaN loss at step 40 (skipped), rank 1 killed at 130, restart from the step-100
  // checkpoint, success at 200.
  const { dir } = await fixture('restart', ['--steps', '200', '--nan-at', '40', '--fail-at', '130', '--resume-from', '100']);
  const dash = t.start('restart-dashboard', cohort, ['dashboard', dir, '--no-follow']);
  const url = await t.printedUrl(dash);
  // The same run cut right after the failure: the failed rank and its reason.
  const cut = await fixture('failed', ['--steps', '200', '--fail-at', '130', '--end-at-failure']);
  const dash2 = t.start('failed-dashboard', cohort, ['dashboard', cut.dir, '--no-follow']);
  const url2 = await t.printedUrl(dash2);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    const n = await t.waitFor('the whole run', async () => {
      const x = await t.pageNumbers(page);
      return x.step === 200 && x.jobState === 'succeeded' ? x : null;
    }, 10000);
    assert.strictEqual(await page.textContent('#restarts'), '1');
    // The loss chart follows the run's current lineage: steps 1..200 once each, in order.
    const xs = await page.evaluate(() => window.cohortDashboard.charts.loss.data.datasets[0].data.map((p) => p.x));
    assert.strictEqual(xs.length, 200, 'points: ' + xs.length);
    assert.ok(xs.every((x, i) => x === i + 1), 'steps in order, once each');
    assert.strictEqual(n.points, 200);
    const marks = await page.evaluate(() => window.cohortDashboard.charts.loss.data.datasets[2].data.map((p) => p.x));
    assert.deepStrictEqual(marks, [40], 'the NaN is marked on the loss chart');
    // The timeline: the NaN and the failure highlighted as bad, the restart as a warning.
    assert.ok(await page.$('#events li[data-kind="anomaly"][data-anomaly="nan"][data-severity="bad"]'), 'NaN event');
    assert.ok(await page.$('#events li[data-kind="failure"][data-severity="bad"]'), 'failure event');
    assert.ok(await page.$('#events li[data-kind="restart"][data-severity="warn"]'), 'restart event');
    assert.match(await page.textContent('#events li[data-kind="failure"] .message'), /killed by signal 9/);
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-restart.png'), fullPage: true });

    const failed = await t.openPage(browser, url2);
    await t.waitFor('rank 1 failed on the page', () => failed.$('#ranks [data-rank="1"][data-state="failed"]'), 10000);
    assert.match(await failed.textContent('#ranks [data-rank="1"] .rank-note'), /killed by signal 9/);
    assert.notStrictEqual(await failed.getAttribute('#ranks [data-rank="0"]', 'data-state'), 'failed');
    await failed.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-failed-rank.png'), fullPage: true });
    assertCleanPage(page, new URL(url).origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
  await t.stop(dash2, 'SIGTERM');
}

async function burstMakesThePageResync() {
  // An empty log, the page open on it, then 20000 steps of 2 ranks at once: far more than a
  // subscriber may fall behind (4096 messages), so the page is told to resync and reloads the state.
  const dir = t.tempDir('burst');
  fs.writeFileSync(path.join(dir, 'events.jsonl'), '');
  const dash = t.start('burst-dashboard', cohort, ['dashboard', dir]);
  const url = await t.printedUrl(dash);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    await t.waitFor('the stream connected', () => page.$('#connection[data-connected="true"]'), 10000);
    assert.strictEqual((await t.pageNumbers(page)).ranks.length, 0);
    const gen = t.start('burst-events', process.execPath, [makeEvents, dir, '--steps', '20000']);
    assert.strictEqual((await t.exitOf(gen, 30000)).code, 0);
    // The page stays busy while the dashboard reads the burst (within a second): the browser stops
    // reading the stream, the server's writes block, and the hub's queue for this page overflows.
    await page.evaluate(() => { const end = Date.now() + 5000; while (Date.now() < end); });
    // Settled: no snapshot on its way (one may still be when the final step shows).
    const n = await t.waitFor('the whole burst on the page', async () => {
      const x = await t.pageNumbers(page);
      const busy = await page.evaluate(() => window.cohortDashboard.stats.loading);
      return x.step === 20000 && x.jobState === 'succeeded' && x.ranks.length === 2 && !busy ? x : null;
    }, 30000);
    const stats = await page.evaluate(() => window.cohortDashboard.stats);
    const xs = await page.evaluate(() => window.cohortDashboard.charts.loss.data.datasets[0].data.map((p) => p.x));
    const gaps = xs.filter((x, i) => i > 0 && x !== xs[i - 1] + 1).length;
    const seen = 'steps ' + xs[0] + '..' + xs[xs.length - 1] + ', ' + gaps + ' gaps, ' + JSON.stringify(stats);
    assert.strictEqual(n.points, 2000, 'the last 2000 steps on the loss chart (' + seen + ')');
    assert.ok(xs[0] === 18001 && gaps === 0, 'steps 18001..20000 in order: ' + seen);
    assert.ok(stats.resyncs >= 1, 'the page was told to resync: ' + JSON.stringify(stats));
    assert.strictEqual(n.navigations, 1, 'without reloading the page');
    console.log('  resyncs: ' + stats.resyncs + ', snapshots: ' + stats.snapshots + ', step ' + n.step + ', ' + n.points + ' loss points');
    assertCleanPage(page, new URL(url).origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
}

async function tokenInTheBrowser() {
  const { dir } = await fixture('token', ['--steps', '120']);
  const dash = t.start('token-dashboard', cohort, ['dashboard', dir, '--host', '0.0.0.0', '--token', 'tok en/42']);
  const printed = await t.printedUrl(dash);
  assert.match(printed, /\?token=tok%20en%2F42$/);
  const url = new URL(printed);
  url.hostname = '127.0.0.1';
  const browser = await t.launchBrowser();
  try {
    const refused = await (await browser.newPage()).goto(url.origin + '/');
    assert.strictEqual(refused.status(), 401, 'the page without its token');
    const page = await t.openPage(browser, url.toString());
    await t.waitFor('the final step', async () => (await t.pageNumbers(page)).step === 120, 10000);
    await t.waitFor('the live stream connected (EventSource carries the token)', () => page.$('#connection[data-connected="true"]'), 10000);
    assert.strictEqual((await t.pageNumbers(page)).ranks.length, 2);
    assertCleanPage(page, url.origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
}

async function clearErrors() {
  const empty = t.tempDir('empty');
  const cases = [
    [['dashboard', path.join(empty, 'missing')], /is not a directory/],
    [['dashboard', empty], /no event log .*events\.jsonl/],
  ];
  // A FIFO as the log would block the open until a writer came (issue 50): refused at once.
  const fifo = t.tempDir('fifo');
  require('child_process').execFileSync('mkfifo', [path.join(fifo, 'events.jsonl')]);
  cases.push([['dashboard', fifo], /events\.jsonl is not a regular file/]);
  const { dir } = await fixture('errors', ['--steps', '5']);
  cases.push([['dashboard', dir, '--host', '0.0.0.0'], /needs a token/]);
  const busy = t.start('busy-dashboard', cohort, ['dashboard', dir]);
  const port = new URL(await t.printedUrl(busy)).port;
  cases.push([['dashboard', dir, '--port', port], new RegExp('port ' + port + ' is in use')]);
  for (const [i, [args, pattern]] of cases.entries()) {
    const c = t.start('error-dashboard-' + i, cohort, args);
    const r = await t.exitOf(c, 15000);
    assert.notStrictEqual(r.code, 0, args.join(' ') + ' must fail');
    assert.match(c.err, pattern, args.join(' '));
    assert.match(c.err, /^cohort dashboard: error: /m);
    console.log('  ' + c.err.trim());
  }
  await t.stop(busy, 'SIGTERM');
}

async function linksToTheSimulatorCalibratedOnTheJob() {
  // A finished 2-rank log: the dashboard's "simulate at scale" opens the simulator's page at /sim/,
  // which starts from a calibration of this log (/sim/params.json) and runs in the same origin.
  const { dir } = await fixture('sim', ['--steps', '200']);
  const dash = t.start('sim-dashboard', cohort, ['dashboard', dir]);
  const url = await t.printedUrl(dash);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    const href = await page.getAttribute('#simulate', 'href');
    assert.strictEqual(href, 'sim/');
    const sim = await t.openPage(browser, new URL(href, url).toString());
    const p = await sim.evaluate(() => window.cohortSim.params);
    assert.strictEqual(p.nodes, 1);
    assert.strictEqual(p.workers_per_node, 2, 'the job\'s shape');
    assert.strictEqual(p.params, 1700000 / 4, 'the gradient bytes of the log');
    assert.ok(p.forward_s > 0.005 && p.forward_s < 0.05, 'forward from the log: ' + p.forward_s);
    await t.waitFor('the simulation running', async () => (await sim.evaluate(() => window.cohortSim.report.t)) > 1, 10000);
    assert.strictEqual(await sim.textContent('#world'), '2');
    await sim.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-simulator.png'), fullPage: true });
    assertCleanPage(sim, new URL(url).origin);
  } finally {
    await browser.close();
  }
  await t.stop(dash, 'SIGTERM');
}

t.run([
  ['cohort dashboard follows a growing log; the page updates live and flags the straggler', followsAGrowingLog],
  ['the timeline panel of a finished run: a slow checkpoint, a late bucket, zoom', timelineOfAFinishedRun],
  ['80 ranks on the timeline: 64 drawn, the straggler among them', manyRanksSampleTheStraggler],
  ['a run with a NaN, a killed rank and a restart: timeline, restarts, loss chart, failed rank', failureRestartAndNan],
  ['a burst larger than a stream may queue: the page resyncs from /api/state', burstMakesThePageResync],
  ['a token-protected dashboard works in the browser through ?token=', tokenInTheBrowser],
  ['the dashboard links to the simulator, calibrated on the job', linksToTheSimulatorCalibratedOnTheJob],
  ['cohort dashboard says clearly why it cannot serve', clearErrors],
]);
