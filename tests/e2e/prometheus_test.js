#!/usr/bin/env node
// A real Prometheus (Debian's `prometheus`) scrapes the /metrics of a real 2-rank job: started on
// loopback with a generated config (scrape_interval 1s) and a temporary TSDB, it must return the
// job's per-rank series through its query API, with cohort's `job` label and the right types.
'use strict';

const fs = require('fs');
const path = require('path');
const t = require('./lib');
const { assert } = t;

const cohort = t.env('COHORT_CLI');
const fashionMnist = t.env('FASHION_MNIST');

async function query(base, promql) {
  const r = await t.request(base + '/api/v1/query?query=' + encodeURIComponent(promql));
  if (r.status !== 200) throw new Error('query ' + promql + ': HTTP ' + r.status + ' ' + r.body);
  const j = JSON.parse(r.body);
  if (j.status !== 'success') throw new Error('query ' + promql + ': ' + r.body);
  return j.data.result;
}

async function scrapesAJob() {
  const prometheus = t.env('PROMETHEUS', t.which('prometheus') || '/usr/bin/prometheus');
  if (!fs.existsSync(prometheus)) t.skip('prometheus is missing: run scripts/setup-test-tools.sh (apt prometheus)');

  const runDir = t.tempDir('prom-run');
  const job = t.start('prometheus-job', cohort, [
    'run', '--nproc-per-node', '2', '--run-dir', runDir, '--',
    fashionMnist, '--no-eval', '--log-every', '0', '--max-steps', '5000',
  ]);
  const url = new URL(await t.dashboardUrl(runDir, job));
  const state = JSON.parse((await t.request(url.origin + '/api/state')).body);
  const jobName = state.job.name;
  assert.ok(jobName, 'the hub names the job');

  // Prometheus on a free loopback port, scraping the job's /metrics every second. honor_labels
  // keeps cohort's own `job` label (the run's name) instead of renaming it exported_job.
  const promDir = t.tempDir('prom');
  const port = await t.freePort();
  const config = path.join(promDir, 'prometheus.yml');
  fs.writeFileSync(config, [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    '  evaluation_interval: 1s',
    'scrape_configs:',
    '  - job_name: cohort-e2e',
    '    honor_labels: true',
    '    metrics_path: /metrics',
    '    static_configs:',
    "      - targets: ['" + url.host + "']",
    '',
  ].join('\n'));
  fs.copyFileSync(config, path.join(t.artifactsDir(), 'prometheus.yml'));
  const prom = t.start('prometheus', prometheus, [
    '--config.file=' + config,
    '--storage.tsdb.path=' + path.join(promDir, 'data'),
    '--web.listen-address=127.0.0.1:' + port,
    '--log.level=warn',
  ], { cwd: promDir });
  const base = 'http://127.0.0.1:' + port;
  await t.waitFor('prometheus to be ready', async () => {
    if (prom.code !== undefined) throw new Error('prometheus exited: ' + prom.err.slice(-2000));
    return (await t.request(base + '/-/ready')).status === 200;
  }, 60000, 500);

  // Its target is up, and its query API returns cohort_rank_step of both ranks, labelled.
  const series = await t.waitFor('cohort_rank_step of both ranks in Prometheus', async () => {
    if (job.code !== undefined) throw new Error('the job ended early: ' + job.err.slice(-2000));
    const r = await query(base, 'cohort_rank_step');
    return r.length === 2 ? r : null;
  }, 90000, 1000);
  const ranks = series.map((s) => s.metric.rank).sort();
  assert.deepStrictEqual(ranks, ['0', '1']);
  for (const s of series) {
    assert.strictEqual(s.metric.job, jobName, 'the job label: ' + JSON.stringify(s.metric));
    assert.strictEqual(s.metric.__name__, 'cohort_rank_step');
  }
  const targets = JSON.parse((await t.request(base + '/api/v1/targets')).body).data.activeTargets;
  assert.strictEqual(targets.length, 1);
  assert.strictEqual(targets[0].health, 'up', 'scrape error: ' + targets[0].lastError);

  // The steps advance between scrapes; other families are there with their types.
  const before = Math.min(...series.map((s) => Number(s.value[1])));
  await t.waitFor('the steps to advance in Prometheus', async () => {
    const r = await query(base, 'min(cohort_rank_step)');
    return r.length === 1 && Number(r[0].value[1]) > before;
  }, 30000, 1000);
  for (const q of ['cohort_up', 'cohort_world_size', 'cohort_rank_steps_total', 'cohort_step_seconds',
                   'cohort_phase_seconds', 'cohort_scalar{name="loss"}', 'cohort_job_state{state="running"}']) {
    const r = await query(base, q);
    assert.ok(r.length >= 1, q + ' has no series');
  }
  assert.strictEqual(Number((await query(base, 'cohort_world_size'))[0].value[1]), 2);
  assert.strictEqual(Number((await query(base, 'cohort_job_state{state="running"}'))[0].value[1]), 1);
  const metadata = JSON.parse((await t.request(base + '/api/v1/metadata')).body).data;
  assert.strictEqual(metadata.cohort_rank_steps_total[0].type, 'counter');
  assert.strictEqual(metadata.cohort_rank_step[0].type, 'gauge');
  const rate = await query(base, 'rate(cohort_rank_steps_total[5s])');
  console.log('  ' + series.length + ' cohort_rank_step series, job="' + jobName + '"; steps/s per rank: ' +
              rate.map((s) => s.metric.rank + ':' + Number(s.value[1]).toFixed(1)).join(' '));

  await t.stop(job, 'SIGINT', 30000);
  await t.stop(prom, 'SIGTERM', 15000);
}

t.run([['a real Prometheus scrapes a running job and returns its per-rank series', scrapesAJob]]);
