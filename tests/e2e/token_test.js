#!/usr/bin/env node
// A dashboard bound to a non-loopback address (0.0.0.0) needs a token, and refuses every request
// that does not carry it; without a token `cohort run` refuses to start at all (before any
// worker); and every endpoint is read-only. Requests go to 127.0.0.1, which 0.0.0.0 includes.
'use strict';

const fs = require('fs');
const path = require('path');
const t = require('./lib');
const { assert } = t;

const cohort = t.env('COHORT_CLI');
const TOKEN = 'e2e-Token_1234';
const sleepBin = t.which('sleep') || '/bin/sleep';

async function checkEndpoints(port, token) {
  const base = 'http://127.0.0.1:' + port;
  for (const p of ['/', '/assets/app.js', '/api/state', '/metrics', '/api/stream']) {
    const none = await t.request(base + p, { method: p === '/api/stream' ? 'HEAD' : 'GET' });
    assert.strictEqual(none.status, 401, p + ' without the token');
    assert.ok(!none.body.includes(token), 'the refusal does not echo the token');
    const wrong = await t.request(base + p + '?token=not-' + token, { method: 'HEAD' });
    assert.strictEqual(wrong.status, 401, p + ' with a wrong token');
    const bearer = await t.request(base + p, { method: 'HEAD', headers: { Authorization: 'Bearer ' + token } });
    assert.strictEqual(bearer.status, 200, p + ' with Authorization: Bearer');
    const query = await t.request(base + p + '?token=' + encodeURIComponent(token), { method: 'HEAD' });
    assert.strictEqual(query.status, 200, p + ' with ?token=');
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      const w = await t.request(base + p, { method, headers: { Authorization: 'Bearer ' + token }, body: '{}' });
      assert.strictEqual(w.status, 405, method + ' ' + p);
      assert.strictEqual(w.headers.allow, 'GET, HEAD');
    }
  }
  const metrics = await t.request(base + '/metrics', { headers: { Authorization: 'Bearer ' + token } });
  assert.match(metrics.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  assert.match(metrics.body, /^# TYPE cohort_up gauge$/m);
}

async function runWithToken() {
  const runDir = t.tempDir('token-run');
  const job = t.start('token-job', cohort, [
    'run', '--nproc-per-node', '1', '--run-dir', runDir,
    '--dashboard-host', '0.0.0.0', '--dashboard-token', TOKEN, '--', sleepBin, '60',
  ]);
  const url = new URL(await t.dashboardUrl(runDir, job));
  assert.strictEqual(url.searchParams.get('token'), TOKEN, 'the printed URL carries the token: ' + url);
  await checkEndpoints(url.port, TOKEN);
  await t.stop(job, 'SIGINT', 20000);
}

async function runWithTokenFromEnvironment() {
  const runDir = t.tempDir('token-env');
  const job = t.start('token-env-job', cohort, [
    'run', '--nproc-per-node', '1', '--run-dir', runDir, '--dashboard-host', '0.0.0.0', '--', sleepBin, '60',
  ], { env: { COHORT_DASHBOARD_TOKEN: TOKEN + '-env' } });
  const url = new URL(await t.dashboardUrl(runDir, job));
  const base = 'http://127.0.0.1:' + url.port;
  assert.strictEqual((await t.request(base + '/api/state')).status, 401);
  assert.strictEqual((await t.request(base + '/api/state', { headers: { Authorization: 'Bearer ' + TOKEN + '-env' } })).status, 200);
  await t.stop(job, 'SIGINT', 20000);
}

async function runWithoutTokenRefuses() {
  const runDir = t.tempDir('no-token');
  const marker = path.join(runDir, 'a-worker-ran');
  const job = t.start('no-token-job', cohort, [
    'run', '--nproc-per-node', '2', '--run-dir', runDir, '--dashboard-host', '0.0.0.0', '--', t.which('touch') || '/usr/bin/touch', marker,
  ], { env: { COHORT_DASHBOARD_TOKEN: '' } });
  const r = await t.exitOf(job, 30000);
  assert.notStrictEqual(r.code, 0, 'cohort run must refuse');
  assert.match(job.err, /token/i, 'the message says a token is needed: ' + job.err);
  assert.match(job.err, /0\.0\.0\.0/, 'and names the address: ' + job.err);
  assert.ok(!fs.existsSync(marker), 'no worker may have started');
  console.log('  ' + job.err.trim().split('\n').slice(-1)[0]);
}

async function loopbackNeedsNoTokenButStaysReadOnly() {
  const runDir = t.tempDir('loopback');
  const job = t.start('loopback-job', cohort, ['run', '--nproc-per-node', '1', '--run-dir', runDir, '--', sleepBin, '60']);
  const url = new URL(await t.dashboardUrl(runDir, job));
  assert.strictEqual(url.hostname, '127.0.0.1');
  assert.strictEqual(url.search, '');
  assert.strictEqual((await t.request(url.origin + '/api/state')).status, 200);
  const post = await t.request(url.origin + '/api/state', { method: 'POST', body: '{}' });
  assert.strictEqual(post.status, 405);
  await t.stop(job, 'SIGINT', 20000);
}

t.run([
  ['cohort run --dashboard-host 0.0.0.0 --dashboard-token: 401 without the token, 200 with it, 405 for writes', runWithToken],
  ['the token from COHORT_DASHBOARD_TOKEN', runWithTokenFromEnvironment],
  ['cohort run --dashboard-host 0.0.0.0 without a token exits before starting workers', runWithoutTokenRefuses],
  ['a loopback dashboard needs no token and is read-only too', loopbackNeedsNoTokenButStaysReadOnly],
]);
