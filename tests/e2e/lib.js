// Helpers of the browser and Prometheus tests: processes with captured output that are always
// stopped, HTTP without extra packages, polling with clear failures, the browser, and a tiny
// sequential runner (exit 0: all passed; 1: a failure; 77: skipped, what CTest's
// SKIP_RETURN_CODE expects when a tool is missing).
// Environment (set by tests/e2e/CMakeLists.txt): COHORT_CLI, FASHION_MNIST, E2E_ARTIFACTS,
// and optionally CHROMIUM (default /usr/bin/chromium), PROMETHEUS (default: prometheus on PATH).
'use strict';

const assert = require('assert');
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');

const SKIP = 77;
const children = new Set();
const tempDirs = [];

function env(name, fallback) {
  const v = process.env[name];
  if (v) return v;
  if (fallback !== undefined) return fallback;
  throw new Error(name + ' is not set (the CTest registration in tests/e2e/CMakeLists.txt sets it)');
}

// scripts/test.sh (and so CI) sets COHORT_E2E_REQUIRED=1: there a missing tool is a failure, since
// setup-test-tools.sh installed them all; a developer's partial setup gets a skip.
function skip(why) {
  if (process.env.COHORT_E2E_REQUIRED === '1') {
    console.log('FAILED: ' + why + ' (COHORT_E2E_REQUIRED=1: scripts/setup-test-tools.sh installs it)');
    process.exit(1);
  }
  console.log('SKIPPED: ' + why);
  process.exit(SKIP);
}

function artifactsDir() {
  const dir = env('E2E_ARTIFACTS', path.join(__dirname, 'artifacts'));
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

function tempDir(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cohort-e2e-' + tag + '-'));
  tempDirs.push(dir);
  return dir;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/// Polls fn (sync or async) until it returns a truthy value; fails naming `what` with the last value.
async function waitFor(what, fn, timeoutMs, intervalMs = 200) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error('timed out after ' + timeoutMs / 1000 + ' s waiting for ' + what + (last !== undefined ? ' (last: ' + String(last && last.message ? last.message : JSON.stringify(last)) + ')' : ''));
    }
    await sleep(intervalMs);
  }
}

/// A process in its own process group (so that stopping it stops its children too), with its
/// output kept and copied to <artifacts>/<name>.log.
function start(name, cmd, args, options = {}) {
  const log = fs.createWriteStream(path.join(artifactsDir(), name + '.log'));
  log.write('$ ' + [cmd, ...args].join(' ') + '\n');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: Object.assign({}, process.env, options.env || {}), cwd: options.cwd });
  child.name = name;
  child.out = '';
  child.err = '';
  child.exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      child.code = code;
      child.signal = signal;
      children.delete(child);
      resolve({ code, signal });
    });
    child.on('error', (e) => {
      child.err += String(e);
      children.delete(child);
      resolve({ code: -1, signal: null });
    });
  });
  child.stdout.on('data', (d) => { child.out += d; log.write(d); });
  child.stderr.on('data', (d) => { child.err += d; log.write(d); });
  children.add(child);
  return child;
}

/// Stops a process group: `signal` first, SIGKILL after graceMs.
async function stop(child, signal = 'SIGTERM', graceMs = 10000) {
  if (!child || child.code !== undefined || child.signal) return child && child.exited;
  try { process.kill(-child.pid, signal); } catch (e) { /* gone */ }
  const timer = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch (e) { /* gone */ } }, graceMs);
  const r = await child.exited;
  clearTimeout(timer);
  return r;
}

/// Waits for the exit, at most timeoutMs (then kills it and fails).
async function exitOf(child, timeoutMs) {
  const r = await Promise.race([child.exited, sleep(timeoutMs).then(() => null)]);
  if (r === null) {
    await stop(child, 'SIGKILL');
    throw new Error(child.name + ' did not exit within ' + timeoutMs / 1000 + ' s; output:\n' + child.out + child.err);
  }
  return r;
}

function cleanup() {
  for (const c of [...children]) {
    try { process.kill(-c.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  }
  for (const d of tempDirs) {
    try { fs.rmSync(d, { recursive: true, force: true }); } catch (e) { /* kept */ }
  }
}

/// GET (or another method) over plain http; resolves {status, headers, body}.
function request(url, options = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method || 'GET', headers: options.headers || {}, timeout: options.timeoutMs || 10000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout: ' + url)));
    req.on('error', reject);
    if (options.body) req.write(options.body);
    req.end();
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/// The dashboard URL `cohort run` wrote to <run_dir>/dashboard.url.
async function dashboardUrl(runDir, job, timeoutMs = 60000) {
  const file = path.join(runDir, 'dashboard.url');
  return waitFor(file, () => {
    if (job && job.code !== undefined) throw new Error('cohort run exited (' + job.code + ') before writing ' + file + ':\n' + job.err.slice(-3000));
    if (!fs.existsSync(file)) return null;
    const text = fs.readFileSync(file, 'utf8').trim();
    return /^http:\/\/\S+\/\S*$/.test(text) ? text : null;
  }, timeoutMs);
}

/// The URL `cohort dashboard` printed ("... dashboard at URL (metrics at ...").
async function printedUrl(child, timeoutMs = 15000) {
  return waitFor('the URL printed by ' + child.name, () => {
    if (child.code !== undefined) throw new Error(child.name + ' exited (' + child.code + '): ' + child.err);
    const m = /(?:dashboard|simulator) at (http:\/\/\S+)/.exec(child.out);
    return m ? m[1] : null;
  }, timeoutMs);
}

function loadPlaywright() {
  // tests/e2e/node.sh sets PLAYWRIGHT_CORE: the driver package inside Python's playwright wheel.
  const where = process.env.PLAYWRIGHT_CORE;
  try {
    if (!where) throw new Error('PLAYWRIGHT_CORE is not set');
    return require(where);
  } catch (e) {
    skip('playwright-core is not available (' + e.message + '): run scripts/setup-test-tools.sh and start the test through tests/e2e/node.sh');
  }
  return null;
}

/// Debian's chromium, headless (as root it needs --no-sandbox).
async function launchBrowser() {
  const executablePath = env('CHROMIUM', '/usr/bin/chromium');
  if (!fs.existsSync(executablePath)) skip(executablePath + ' is missing: run scripts/setup-test-tools.sh (apt chromium)');
  const { chromium } = loadPlaywright();
  const args = ['--disable-dev-shm-usage', '--disable-gpu'];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
  return chromium.launch({ executablePath, headless: true, args, timeout: 60000 });
}

/// A page that records console errors, page errors and CSP violations, for asserting none happened.
async function openPage(browser, url) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  page.problems = [];
  page.requests = [];
  page.on('console', (m) => { if (m.type() === 'error') page.problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => page.problems.push('page error: ' + e.message));
  page.on('request', (r) => page.requests.push(r.url()));
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { timeout: 20000 });
  return page;
}

/// Numbers the page shows, read the way a user would (and the chart's point count).
async function pageNumbers(page) {
  return page.evaluate(() => ({
    step: Number(document.getElementById('step').textContent),
    points: Number(document.getElementById('loss-chart').dataset.points),
    chartPoints: window.cohortDashboard && window.cohortDashboard.charts.loss ? window.cohortDashboard.charts.loss.data.datasets[0].data.length : -1,
    ranks: [...document.querySelectorAll('#ranks [data-rank]')].map((e) => ({ rank: Number(e.dataset.rank), state: e.dataset.state, slowPhase: e.dataset.slowPhase || '' })),
    jobState: document.getElementById('job-state').dataset.state,
    worldSize: document.getElementById('world-size').textContent,
    navigations: performance.getEntriesByType('navigation').length,
  }));
}

/// Runs the cases in order; a failing case prints its error and the run exits 1.
async function run(cases) {
  let failed = 0;
  const onSignal = () => { cleanup(); process.exit(1); };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // COHORT_E2E_CASE (a regular expression) runs only the cases whose names match, to chase one.
  const only = process.env.COHORT_E2E_CASE ? new RegExp(process.env.COHORT_E2E_CASE) : null;
  if (only) cases = cases.filter(([name]) => only.test(name));
  for (const [name, fn] of cases) {
    const t0 = Date.now();
    console.log('[ RUN  ] ' + name);
    try {
      await fn();
      console.log('[  OK  ] ' + name + ' (' + ((Date.now() - t0) / 1000).toFixed(1) + ' s)');
    } catch (e) {
      failed++;
      console.log('[FAILED] ' + name + ': ' + (e && e.stack ? e.stack : e));
    }
    for (const c of [...children]) await stop(c, 'SIGKILL');
  }
  cleanup();
  console.log(failed ? failed + ' case(s) failed' : 'all ' + cases.length + ' case(s) passed');
  process.exit(failed ? 1 : 0);
}

function which(cmd) {
  try {
    return execFileSync('sh', ['-c', 'command -v ' + cmd], { encoding: 'utf8' }).trim() || null;
  } catch (e) {
    return null;
  }
}

module.exports = {
  assert, env, skip, artifactsDir, tempDir, sleep, waitFor, start, stop, exitOf, request, freePort,
  dashboardUrl, printedUrl, launchBrowser, openPage, pageNumbers, run, which, SKIP,
};
