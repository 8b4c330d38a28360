#!/usr/bin/env node
// The live dashboard of a real 2-rank Fashion-MNIST job under `cohort run`, in headless Chromium
// driven by playwright-core: both ranks shown, the step counter and the loss chart advancing
// without a reload, a screenshot; a job with rank 1 slowed (--slow-rank 1 --slow-ms 80) flagged
// as a straggler on the page; and `cohort dashboard RUN_DIR` on the finished run's log showing its
// final step; the timeline panel (issue 49) draws both ranks' last steps live, and the slowed
// rank's long phase with the other rank's wait. Screenshots: $E2E_ARTIFACTS/dashboard.png,
// dashboard-timeline.png, dashboard-straggler.png, dashboard-timeline-straggler.png, dashboard-finished.png.
'use strict';

const fs = require('fs');
const path = require('path');
const t = require('./lib');
const { timelineInfo, clickSpan } = require('./timeline_checks');
const { assert } = t;
const TIMELINE = 'window.cohortDashboard.timeline.view';

// The timeline panel's spans per rank and step (issue 49): {rank: {step: {name: total seconds}}}.
function byRankAndStep(info) {
  const out = {};
  for (const d of info.drawn) {
    const r = (out[d.lane] = out[d.lane] || {});
    const st = (r[d.step] = r[d.step] || {});
    st[d.name] = (st[d.name] || 0) + d.dur;
  }
  return out;
}
const medianOf = (v) => { const s = [...v].sort((a, b) => a - b); return s.length ? s[s.length >> 1] : NaN; };

const cohort = t.env('COHORT_CLI');
const fashionMnist = t.env('FASHION_MNIST');
const STEPS = 400;  // ~15-30 s on two cores

function startJob(tag, extra) {
  const runDir = t.tempDir(tag);
  const job = t.start(tag + '-job', cohort, [
    'run', '--nproc-per-node', '2', '--run-dir', runDir, '--',
    fashionMnist, '--no-eval', '--log-every', '0', ...extra,
  ]);
  return { runDir, job };
}

async function liveJob() {
  const { runDir, job } = startJob('live', ['--max-steps', String(STEPS)]);
  const url = await t.dashboardUrl(runDir, job);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/, 'loopback by default, no token');
  await t.waitFor('the URL printed by cohort run', () => job.err.includes('dashboard at ' + url), 10000);

  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    await page.evaluate(() => { window.__sameDocument = 'yes'; });
    await t.waitFor('both ranks on the page, running', async () => {
      const n = await t.pageNumbers(page);
      // (a busy machine may flag a rank slow for a while: that is the detector's business here)
      return n.ranks.length === 2 && n.ranks.every((r) => r.state === 'running' || r.state === 'slow') && n.step > 0 ? n : null;
    }, 90000);
    const first = await t.pageNumbers(page);
    assert.strictEqual(first.worldSize, '2');
    const later = await t.waitFor('the step counter and the loss chart to advance without a reload', async () => {
      const n = await t.pageNumbers(page);
      return n.step >= first.step + 10 && n.points >= first.points + 10 ? n : null;
    }, 60000);
    assert.strictEqual(await page.evaluate(() => window.__sameDocument), 'yes', 'the page reloaded');
    assert.strictEqual(later.navigations, 1);
    assert.strictEqual(later.chartPoints, later.points);
    console.log('  step ' + first.step + ' -> ' + later.step + ', loss chart points ' + first.points + ' -> ' + later.points);
    // The screenshot with some history on the charts (not a condition of the test).
    await t.waitFor('step 150', async () => (await t.pageNumbers(page)).step >= 150 || job.code !== undefined, 60000).catch(() => {});
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard.png'), fullPage: true });

    // The timeline panel draws the live job's last 10 steps of both ranks, every phase of each and
    // the gradient buckets, and follows the job; a click on a bucket shows its details.
    const tl = await t.waitFor('the timeline panel with 10 steps of both ranks', async () => {
      const i = await timelineInfo(page, TIMELINE);
      const per = i ? byRankAndStep(i) : {};
      return per[0] && per[1] && Object.keys(per[0]).length === 10 && Object.keys(per[1]).length === 10 ? i : null;
    }, 30000);
    const per = byRankAndStep(tl);
    for (const r of [0, 1]) {
      for (const [step, names] of Object.entries(per[r])) {
        for (const name of ['forward', 'backward', 'optimizer', 'bucket']) assert.ok(names[name] > 0, 'rank ' + r + ' step ' + step + ': ' + name + ' in ' + JSON.stringify(names));
      }
    }
    assert.ok(tl.painted > 5000, 'the canvas is painted');
    const newest = Math.max(...tl.drawn.map((d) => d.step));
    if (job.code === undefined) {
      await t.waitFor('the timeline following the live job', async () => Math.max(...(await timelineInfo(page, TIMELINE)).drawn.map((d) => d.step)) > newest, 30000);
    }
    await page.click('.tl-zoom[data-zoom="in"]');  // stops following: the spans stay where they are drawn
    const still = await timelineInfo(page, TIMELINE);
    // (the newest bucket in view: the oldest steps leave the panel as new ones come)
    const bucket = still.drawn.filter((d) => d.name === 'bucket' && d.lane === 1 && d.w >= 2).sort((a, b) => b.step - a.step)[0];
    assert.ok(bucket, 'a bucket of rank 1 in the zoomed view');
    const details = await clickSpan(page, bucket);
    assert.strictEqual(details.name, 'bucket');
    assert.strictEqual(details.fields.rank, 'rank 1');
    assert.strictEqual(details.step, String(bucket.step));
    assert.match(details.fields.bytes, /^\d+$/);
    assert.ok(details.fields.algorithm, 'the bucket\'s algorithm: ' + details.text);
    await page.locator('.timeline-panel').screenshot({ path: path.join(t.artifactsDir(), 'dashboard-timeline.png') });
    console.log('  timeline: steps ' + Math.min(...tl.drawn.map((d) => d.step)) + '..' + newest + ', ' + tl.drawn.length + ' spans; clicked: bucket ' + details.fields.index + ' of step ' + details.step + ', ' + details.fields.bytes + ' bytes');

    // The end: the page shows the last step and the job's final state, still without a reload.
    const r = await t.exitOf(job, 300000);
    assert.strictEqual(r.code, 0, 'the job failed:\n' + job.err.slice(-3000));
    const end = await t.waitFor('the final step and state on the page', async () => {
      const n = await t.pageNumbers(page);
      return n.step === STEPS && n.jobState === 'succeeded' ? n : null;
    }, 15000).catch(async (e) => {
      // The server ends with the job: what the page holds is what it got before that.
      const n = await t.pageNumbers(page);
      if (n.step >= later.step) return n;
      throw e;
    });
    console.log('  at the end the page shows step ' + end.step + ', job ' + end.jobState);
    assert.deepStrictEqual(page.problems.filter((p) => !/ERR_CONNECTION_REFUSED|EventSource|net::/.test(p)), [],
      'console errors, page errors or CSP violations');
    const origin = new URL(url).origin;
    assert.deepStrictEqual(page.requests.filter((u) => !u.startsWith(origin) && !u.startsWith('data:')), []);
  } finally {
    await browser.close();
  }

  // `cohort dashboard RUN_DIR` on the finished run's log: the same page, the final step.
  const dash = t.start('live-replay', cohort, ['dashboard', runDir, '--no-follow']);
  const replayUrl = await t.printedUrl(dash);
  const browser2 = await t.launchBrowser();
  try {
    const page = await t.openPage(browser2, replayUrl);
    const n = await t.waitFor('the finished run on the replayed page', async () => {
      const x = await t.pageNumbers(page);
      return x.step === STEPS && x.jobState === 'succeeded' && x.ranks.length === 2 ? x : null;
    }, 15000);
    assert.ok(n.points >= Math.min(STEPS, 2000) - 5, 'the loss chart holds the run: ' + n.points + ' points');
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-finished.png'), fullPage: true });
  } finally {
    await browser2.close();
  }
  await t.stop(dash, 'SIGINT');
}

async function straggler() {
  const { runDir, job } = startJob('straggler', ['--max-steps', '2000', '--slow-rank', '1', '--slow-ms', '80']);
  const url = await t.dashboardUrl(runDir, job);
  const browser = await t.launchBrowser();
  try {
    const page = await t.openPage(browser, url);
    await t.waitFor('rank 1 flagged slow on the page', () => page.$('#ranks [data-rank="1"][data-state="slow"]'), 120000);
    const n = await t.pageNumbers(page);
    assert.strictEqual(n.ranks.find((r) => r.rank === 0).state, 'running', 'rank 0 is not the straggler');
    const slow = n.ranks.find((r) => r.rank === 1);
    assert.ok(slow.slowPhase, 'the slow phase is shown');
    assert.match(await page.textContent('#ranks [data-rank="1"] .rank-note'), new RegExp('straggler: ' + slow.slowPhase + ' slow'));
    // The page agrees with the hub's anomaly event, and lists it in the timeline.
    const state = JSON.parse((await t.request(url + 'api/state')).body);
    const event = state.events.find((e) => e.kind === 'anomaly' && e.anomaly === 'straggler');
    assert.ok(event, 'a straggler anomaly event');
    assert.strictEqual(event.rank, 1);
    assert.strictEqual(slow.slowPhase, event.phase);
    await t.waitFor('the straggler in the event timeline', () => page.$('#events li[data-anomaly="straggler"][data-event-rank="1"]'), 10000);
    console.log('  rank 1 flagged: ' + event.message);
    await t.waitFor('a few more steps in the step-time view', async () => (await t.pageNumbers(page)).step >= 25, 60000);
    await page.screenshot({ path: path.join(t.artifactsDir(), 'dashboard-straggler.png'), fullPage: true });
    // On the timeline: rank 1's slowed phase is long in every step shown while rank 0 waits for it
    // (medians over the last 10 steps: the 80 ms sleep against a busy machine's noise).
    const tl = byRankAndStep(await timelineInfo(page, TIMELINE));
    const med = (r, name) => medianOf(Object.values(tl[r] || {}).map((n) => n[name] || 0));
    const phase = slow.slowPhase;
    assert.ok(med(1, phase) > med(0, phase) + 0.05, 'rank 1\'s ' + phase + ' on the timeline: ' + med(1, phase) + ' s vs ' + med(0, phase) + ' s');
    assert.ok(med(0, 'comm_wait') > med(1, 'comm_wait') + 0.04, 'rank 0 waits: ' + med(0, 'comm_wait') + ' s vs ' + med(1, 'comm_wait') + ' s');
    console.log('  timeline: rank 1 ' + phase + ' ' + (med(1, phase) * 1000).toFixed(1) + ' ms, rank 0 comm_wait ' + (med(0, 'comm_wait') * 1000).toFixed(1) + ' ms (medians)');
    await page.locator('.timeline-panel').screenshot({ path: path.join(t.artifactsDir(), 'dashboard-timeline-straggler.png') });
  } finally {
    await browser.close();
  }
  const r = await t.stop(job, 'SIGINT', 30000);
  assert.ok(r.code !== 0 || r.signal, 'interrupted');
  const log = fs.readFileSync(path.join(runDir, 'events.jsonl'), 'utf8');
  assert.match(log, /"anomaly":"straggler"/);
}

t.run([
  ['a live 2-rank job: both ranks, the step counter and the loss chart advance without a reload; replay of its log', liveJob],
  ['a job with rank 1 slowed: rank 1 flagged as a straggler on the page', straggler],
]);
