// The simulator's page (web/sim/, docs/sim.md) in headless Chromium: it opens from a file and runs
// the WebAssembly core; parameters changed through its controls while it runs move the charted
// throughput and goodput exactly as `cohort sim run --at` predicts; bad values are named; `cohort
// sim serve` serves it on loopback with the parameters it was given. Screenshots in artifacts/.
'use strict';

const assert = require('assert');
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const t = require('./lib');
const { timelineInfo, clickSpan } = require('./timeline_checks');

const cohort = t.env('COHORT_CLI');
const pageDir = t.env('COHORT_SIM_PAGE');
const fileUrl = 'file://' + path.join(pageDir, 'index.html');

function assertClean(page) {
  assert.deepStrictEqual(page.problems, [], 'console errors, page errors or CSP violations: ' + page.problems.join('; '));
  const foreign = page.requests.filter((u) => !u.startsWith('file://') && !u.startsWith('data:') && !u.startsWith('http://127.0.0.1'));
  assert.deepStrictEqual(foreign, [], 'requests beyond the page');
}

function cli(args) {
  return JSON.parse(execFileSync(cohort, ['sim', ...args], { encoding: 'utf8', maxBuffer: 64 << 20 }));
}

const mean = (v) => v.reduce((a, b) => a + b, 0) / v.length;

// A 64-worker job with failures, bandwidth-bound enough that a cut shows: 10 days in hourly points.
const job = {
  nodes: 16, workers_per_node: 4, params: 2e8, forward_s: 0.25, backward_s: 0.5, optimizer_s: 0.02,
  compute_cv: 0.03, inter_bw: 2e9, node_mtbf_h: 300, checkpoint_every: 400, checkpoint_bw: 5e8,
  hours: 240, sample_s: 3600, seed: 11,
};

async function opensFromAFileAndRuns() {
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, fileUrl + '?preset=64-gpus');
    const t0 = await page.evaluate(() => window.cohortSim.report.t);
    await t.waitFor('the simulated clock advancing in real time', async () =>
      (await page.evaluate(() => window.cohortSim.report.t)) > t0 + 600, 20000);
    await page.evaluate(() => window.cohortSim.runTo(6 * 3600));
    const seen = await page.evaluate(() => {
      const c = window.cohortSim.charts;
      const canvas = document.getElementById('timeline');
      const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      let painted = 0;
      for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
      return {
        throughput: c.throughput.data.datasets[0].data.length,
        goodput: c.throughput.data.datasets[2].data.length,
        compute: c.step.data.datasets[0].data[0],
        memory: c.memory.data.datasets.reduce((a, d) => a + d.data[0], 0),
        painted,
        rows: window.cohortSim.report.timeline.length,
        world: document.getElementById('world').textContent,
        state: document.getElementById('state').dataset.state,
        text: document.body.innerText,
      };
    });
    assert.ok(seen.throughput > 50, 'throughput points: ' + seen.throughput);
    assert.strictEqual(seen.goodput, seen.throughput);
    assert.ok(seen.compute > 100, 'compute ms per step: ' + seen.compute);
    assert.ok(seen.memory > 10, 'GiB per worker: ' + seen.memory);  // 1.3B parameters, fp32 Adam and bf16
    assert.ok(seen.painted > 1000, 'the timeline is drawn');
    assert.strictEqual(seen.rows, 32);
    assert.strictEqual(seen.world, '64');
    assert.ok(!/NaN|undefined/.test(seen.text), 'no NaN on the page');
    // The optimum of the checkpoint interval, next to Young/Daly's, drawn.
    await page.click('#optimum');
    const best = Number(await page.getAttribute('#optimum-text', 'data-best'));
    const yd = Number(await page.getAttribute('#optimum-text', 'data-young-daly'));
    assert.ok(best > 0 && yd > 0 && Math.abs(best / yd - 1) < 0.35, 'best ' + best + ' s, Young/Daly ' + yd + ' s');
    console.log('  6 h of 64 GPUs; best checkpoint interval ' + best.toFixed(0) + ' s, Young/Daly ' + yd.toFixed(0) + ' s');
    await page.screenshot({ path: path.join(t.artifactsDir(), 'sim-64-gpus.png'), fullPage: true });
    assertClean(page);
  } finally {
    await browser.close();
  }
}

// The dashboard's timeline view (web/timeline.js) on 1,024 simulated workers: 32 sampled over the
// world, the 4 slow ones among them computing twice as long while the others wait; a click on a
// span names the worker.
async function timelineOfSampledWorkers() {
  const browser = await t.launchBrowser();
  try {
    const big = { nodes: 128, workers_per_node: 8, compute_cv: 0, slow_workers: 4, slow_factor: 2, timeline_workers: 32, timeline_s: 5, hours: 1 };
    const page = await t.openPage(browser, fileUrl + '#params=' + encodeURIComponent(JSON.stringify(big)));
    await page.click('#pause');
    await page.evaluate(() => window.cohortSim.runTo(600));
    const info = await timelineInfo(page, 'window.cohortSim.timeline');
    assert.strictEqual(info.lanes.length, 32);
    assert.deepStrictEqual(info.lanes.slice(0, 3).map((l) => l.label), ['worker 31', 'worker 63', 'worker 95']);
    assert.ok(info.lanes.every((l) => l.spans > 0), 'every sampled worker drawn');
    assert.ok(info.painted > 10000, 'painted: ' + info.painted);
    for (const name of ['compute', 'comm_wait', 'allreduce']) assert.ok(info.legend.includes(name), 'legend ' + name + ': ' + info.legend);
    const busy = new Map();
    for (const d of info.drawn) if (d.name === 'compute') busy.set(d.lane, (busy.get(d.lane) || 0) + d.dur);
    const slow = [255, 511, 767, 1023];
    for (const w of slow) assert.ok(busy.get(w) > 1.8 * busy.get(31), 'worker ' + w + ' computes longer: ' + busy.get(w) + ' vs ' + busy.get(31));
    assert.ok(busy.get(63) < 1.1 * busy.get(31), 'worker 63 is not slow');
    const wait = info.drawn.find((d) => d.lane === 31 && d.name === 'comm_wait' && d.w > 4);
    assert.ok(wait, 'worker 31 waits for the slow ones');
    const details = await clickSpan(page, wait);
    assert.strictEqual(details.name, 'comm_wait');
    assert.strictEqual(details.fields.worker, 'worker 31');
    assert.strictEqual(details.fields.state, 'waiting');
    await page.locator('#timeline-view').screenshot({ path: path.join(t.artifactsDir(), 'sim-timeline-1024-workers.png') });
    assertClean(page);
  } finally {
    await browser.close();
  }
}

async function changesMidRunMoveTheChartsAsTheCliPredicts() {
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, fileUrl + '#params=' + encodeURIComponent(JSON.stringify(job)));
    await page.click('#pause');
    const setControl = async (name, value) => {
      const input = page.locator('[data-param="' + name + '"]');
      await input.fill(String(value));
      await input.press('Tab');  // the change event, as a user leaves the field
    };
    const t1 = await page.evaluate(() => window.cohortSim.runTo(72 * 3600));
    await setControl('inter_bw', 2e8);          // the network cut to a tenth
    const t2 = await page.evaluate(() => window.cohortSim.runTo(144 * 3600));
    await setControl('node_mtbf_h', 150);       // failures twice as often
    await page.evaluate(() => window.cohortSim.runTo(240 * 3600));
    const onPage = await page.evaluate(() => ({
      series: window.cohortSim.series,
      params: window.cohortSim.params,
      chart: window.cohortSim.charts.throughput.data.datasets.map((d) => d.data),
      errors: document.getElementById('errors').hidden,
      goodputText: document.getElementById('goodput').textContent,
    }));
    assert.strictEqual(onPage.errors, true, 'no error shown');
    assert.strictEqual(onPage.params.inter_bw, 2e8);
    assert.strictEqual(onPage.params.node_mtbf_h, 150);

    // The model's own CLI, given the same changes at the same simulated times.
    const file = path.join(t.tempDir('sim'), 'job.json');
    fs.writeFileSync(file, JSON.stringify(job));
    const predicted = cli(['run', '--params', file, '--at', t1 + ':inter_bw=2e8', '--at', t2 + ':node_mtbf_h=150']);
    const withoutMtbf = cli(['run', '--params', file, '--at', t1 + ':inter_bw=2e8']);
    const untouched = cli(['run', '--params', file]);
    assert.strictEqual(onPage.series.length, predicted.series.length);
    for (let i = 0; i < predicted.series.length; i++) {
      for (const k of [1, 2, 3]) {
        const a = onPage.series[i][k], b = predicted.series[i][k];
        assert.ok(Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b)), 'point ' + i + ' field ' + k + ': page ' + a + ', CLI ' + b);
      }
    }
    // What is charted is that series (x in hours).
    assert.deepStrictEqual(onPage.chart[0].map((p) => p.y), onPage.series.map((p) => p[1]));
    assert.deepStrictEqual(onPage.chart[2].map((p) => p.x), onPage.series.map((p) => p[0] / 3600));

    // Direction and amount: throughput after the cut, goodput after MTBF halved.
    const rate = (s, from, to) => mean(s.filter((p) => p[0] > from && p[0] <= to && p[1] > 0).map((p) => p[1]));
    const before = rate(onPage.series, 3600, t1), after = rate(onPage.series, t1 + 3600, t2);
    const cliBefore = rate(untouched.series, t1 + 3600, t2);
    assert.ok(after < 0.8 * before, 'samples/s ' + before.toFixed(0) + ' -> ' + after.toFixed(0));
    assert.ok(Math.abs(after / cliBefore - rate(predicted.series, t1 + 3600, t2) / cliBefore) < 1e-9);
    const last = (s) => s[s.length - 1][2];
    assert.ok(last(onPage.series) < last(withoutMtbf.series), 'goodput ' + last(withoutMtbf.series) + ' -> ' + last(onPage.series));
    assert.ok(predicted.totals.failures > withoutMtbf.totals.failures, 'more failures after MTBF halved');
    console.log('  samples/s ' + before.toFixed(0) + ' -> ' + after.toFixed(0) + ' after the cut (CLI: the same); goodput ' +
      (last(withoutMtbf.series) * 100).toFixed(2) + ' % -> ' + (last(onPage.series) * 100).toFixed(2) + ' % with MTBF halved; ' +
      'failures ' + withoutMtbf.totals.failures + ' -> ' + predicted.totals.failures);
    await page.screenshot({ path: path.join(t.artifactsDir(), 'sim-changed-mid-run.png'), fullPage: true });
    assertClean(page);
  } finally {
    await browser.close();
  }
}

async function badValuesAreNamed() {
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, fileUrl + '?preset=64-gpus');
    const input = page.locator('[data-param="inter_bw"]');
    await input.fill('-5');
    await input.press('Tab');
    await t.waitFor('the error shown', () => page.isVisible('#errors'), 5000);
    const text = await page.textContent('#errors');
    assert.match(text, /inter_bw is -5: must be within \[1, /);
    assert.match(text, /goes on with inter_bw = 50000000000/);
    assert.strictEqual(await input.getAttribute('aria-invalid'), 'true');
    assert.strictEqual(await page.evaluate(() => window.cohortSim.params.inter_bw), 50e9);
    const t0 = await page.evaluate(() => window.cohortSim.report.t);
    await t.waitFor('the simulation going on', async () => (await page.evaluate(() => window.cohortSim.report.t)) > t0, 10000);

    // A whole bad parameter set: every problem named, nothing drawn from it.
    const bad = await t.openPage(browser, fileUrl + '#params=' + encodeURIComponent(JSON.stringify({ nodes: 0, inter_bw: -1, forward_s: 0, backward_s: 0, optimizer_s: 0 })));
    const all = await bad.textContent('#errors');
    assert.match(all, /nodes = '0': out of range/);
    assert.match(all, /inter_bw = '-1': out of range/);
    assert.strictEqual(await bad.getAttribute('#state', 'data-state'), 'error');
    assert.ok(!/NaN/.test(await bad.evaluate(() => document.body.innerText)));
    await bad.screenshot({ path: path.join(t.artifactsDir(), 'sim-bad-input.png'), fullPage: true });
  } finally {
    await browser.close();
  }
}

// Parameters in range that would take more memory than the tab has (issue 50: 4,096 workers over a
// 1e6 s window, a point a microsecond for 1e5 hours): the core's one-line notice shows and the
// simulation goes on, where the tab froze or aborted; a budget past the tab's memory is refused.
async function pastTheMemoryBudgetTheNoticeShows() {
  const browser = await t.launchBrowser();
  try {
    const cases = [
      ['timeline', { nodes: 512, workers_per_node: 8, timeline_workers: 4096, timeline_s: 1e6 },
        /^memory budget 256 MiB \(memory_budget_mb\): the timeline of 4096 workers over timeline_s = 1e\+06 s would take ~[\d.]+ GiB: it keeps the last \d+ steps/],
      ['series', { sample_s: 1e-6, hours: 1e5 },
        /^memory budget 256 MiB \(memory_budget_mb\): the series at sample_s = 1e-06 s would hold 3\.6e\+14 points \(~[\d.]+ PiB\): sampled every [\d.]+ s instead$/],
    ];
    for (const [name, params, expected] of cases) {
      const page = await t.openPage(browser, fileUrl + '#params=' + encodeURIComponent(JSON.stringify(params)));
      await t.waitFor('the notice', () => page.isVisible('#notice'), 10000);
      assert.match(await page.textContent('#notice'), expected);
      const t0 = await page.evaluate(() => window.cohortSim.report.t);
      await t.waitFor('the simulation going on', async () => (await page.evaluate(() => window.cohortSim.report.t)) > t0 + 60, 30000);
      const seen = await page.evaluate(() => {
        window.cohortSim.pause();
        window.cohortSim.runTo(window.cohortSim.report.t + 10);
        const r = window.cohortSim.report;
        return { rows: r.timeline.length, window: r.memory.timeline_s, errors: document.getElementById('errors').hidden };
      });
      assert.strictEqual(seen.errors, true, 'no error shown');
      if (name === 'timeline') {
        assert.strictEqual(seen.rows, 4096);
        assert.ok(seen.window < 1e6, 'the window kept: ' + seen.window + ' s');
        // The view draws a sample of 64 of them, spread evenly (the canvas stays a page tall).
        const info = await timelineInfo(page, 'window.cohortSim.timeline');
        assert.strictEqual(info.lanes.length, 64);
        assert.deepStrictEqual([info.lanes[0].label, info.lanes[63].label], ['worker 63', 'worker 4095']);
        assert.match(await page.textContent('.tl-range'), /64 of 4096 workers, spread evenly/);
      }
      await page.screenshot({ path: path.join(t.artifactsDir(), 'sim-budget-' + name + '.png') });
      assertClean(page);
      await page.close();
    }
    const big = await t.openPage(browser, fileUrl + '#params=' + encodeURIComponent(JSON.stringify({ memory_budget_mb: 4096 })));
    assert.match(await big.textContent('#errors'), /memory_budget_mb is 4096: the page holds at most 1024 MiB/);
    assert.strictEqual(await big.getAttribute('#state', 'data-state'), 'error');
  } finally {
    await browser.close();
  }
}

async function servedOnLoopbackWithItsParameters() {
  const serve = t.start('sim-serve', cohort, ['sim', 'serve', '--preset', 'llama3-4096', '--set', 'nodes=125']);
  const url = await t.printedUrl(serve);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    assert.strictEqual(await page.evaluate(() => window.cohortSim.params.nodes), 125);
    await t.waitFor('1,000 workers running', async () => (await page.textContent('#world')) === '1000', 10000);
    // Frames drawn while it runs (reported, not asserted: speed is for bench/sim/sim_speed.sh).
    await page.waitForTimeout(3000);
    const stats = await page.evaluate(() => window.cohortSim.stats);
    console.log('  1,000 workers served on loopback: ' + stats.fps.toFixed(0) + ' frames/s, last slice ' + stats.advanceMs.toFixed(1) + ' ms');
    assert.ok(stats.advances > 30, 'it ran: ' + JSON.stringify(stats));
    assertClean(page);
  } finally {
    await browser.close();
  }
  await t.stop(serve, 'SIGTERM');
  const open = t.start('sim-serve-open', cohort, ['sim', 'serve', '--host', '0.0.0.0']);
  const r = await t.exitOf(open, 15000);
  assert.notStrictEqual(r.code, 0);
  assert.match(open.err, /cohort sim serve: error: listening on 0\.0\.0\.0 \(not a loopback address\) needs a token/);
}

t.run([
  ['the page opens from a file, runs, and draws every view', opensFromAFileAndRuns],
  ['the timeline of 1,024 workers: a sample over the world, the slow ones among them, the details of a span', timelineOfSampledWorkers],
  ['changes through the controls mid-run move throughput and goodput as cohort sim run --at predicts', changesMidRunMoveTheChartsAsTheCliPredicts],
  ['bad values are named and the simulation goes on', badValuesAreNamed],
  ['past the memory budget the page shows the notice and goes on', pastTheMemoryBudgetTheNoticeShows],
  ['cohort sim serve: loopback, the given parameters, 1,000 workers', servedOnLoopbackWithItsParameters],
]);
