// cohort sim's page: builds a control per parameter from the core's own table (sim_schema), runs
// the WebAssembly core a slice per animation frame, and draws what it reports. A changed control
// goes to the running simulation (sim_set) and takes effect from that moment; a bad value is named
// and the simulation goes on with the last good ones. docs/sim.md describes the views.
(function () {
  'use strict';

  const $ = (id) => document.getElementById(id);
  const FRAME_BUDGET_MS = 12;        // simulation per frame, at most (the rest draws)
  const CHART_MS = 250;              // charts redrawn 4 times a second
  const TIMELINE_MS = 100;
  const MAX_POINTS = 2000;
  // A simulated worker's states as the spans of a real rank's timeline (names and colours shared).
  const SPAN_OF = {
    computing: { name: 'compute', cat: 'compute' }, waiting: { name: 'comm_wait', cat: 'compute' },
    communicating: { name: 'allreduce', cat: 'comm' }, checkpointing: { name: 'checkpoint', cat: 'io' },
    failed: { name: 'failed', cat: 'compute' }, restarting: { name: 'restarting', cat: 'compute' },
  };
  let timelineView = null;

  let core = null;       // the WebAssembly module
  let schema = null;
  let params = null;     // what the running simulation has
  let running = false;
  let finished = false;
  let speed = 600;       // simulated seconds per second
  let last = null;       // the latest report
  let lastChart = 0;
  let lastTimeline = 0;
  const series = [];
  const charts = {};
  const stats = { frames: 0, fps: 0, advances: 0, advanceMs: 0, timelineAdvanceMs: 0, chartMs: 0, timelineMs: 0, summaryMs: 0, starts: 0, sets: 0, errors: 0 };
  let fpsWindow = { t: 0, frames: 0 };

  function call(name, ...args) {
    const types = args.map((a) => (typeof a === 'number' ? 'number' : 'string'));
    return JSON.parse(core.ccall(name, 'string', types, args));
  }

  function showErrors(list) {
    const box = $('errors');
    if (!list || list.length === 0) {
      box.hidden = true;
      box.textContent = '';
      return;
    }
    stats.errors++;
    box.hidden = false;
    box.textContent = list.join('\n');
  }

  /// The core's one line when the memory budget (memory_budget_mb) down-sampled the series or the timeline.
  function showNotice(text) {
    const box = $('notice');
    if (box.textContent !== (text || '')) box.textContent = text || '';
    box.hidden = !text;
  }

  function fmt(v, digits) {
    if (typeof v !== 'number' || !Number.isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e12) return (v / 1e12).toFixed(2) + 'T';
    if (a >= 1e9) return (v / 1e9).toFixed(2) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(2) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    return v.toFixed(digits === undefined ? 2 : digits);
  }
  function fmtBytes(v) {
    if (!Number.isFinite(v)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + ' ' + units[i];
  }
  function fmtClock(t) {
    const d = Math.floor(t / 86400);
    const h = Math.floor((t % 86400) / 3600);
    const m = Math.floor((t % 3600) / 60);
    const s = Math.floor(t % 60);
    const hms = h + ':' + String(m).padStart(2, '0') + ':' + String(s).padStart(2, '0');
    return d ? d + 'd ' + hms : hms;
  }
  const finite = (v) => typeof v === 'number' && Number.isFinite(v);

  // ------------------------------------------------------------------ controls

  function buildControls() {
    const box = $('controls');
    box.textContent = '';
    const groups = new Map();
    for (const spec of schema.params) {
      if (!groups.has(spec.group)) {
        const d = document.createElement('details');
        d.open = ['cluster', 'step', 'network', 'faults', 'checkpoint'].includes(spec.group);
        const s = document.createElement('summary');
        s.textContent = spec.group;
        d.appendChild(s);
        box.appendChild(d);
        groups.set(spec.group, d);
      }
      const label = document.createElement('label');
      label.title = spec.help + (spec.unit ? ' (' + spec.unit + ')' : '');
      const name = document.createElement('span');
      name.textContent = spec.name.replace(/_/g, ' ') + (spec.unit ? ' [' + spec.unit + ']' : '');
      label.appendChild(name);
      let input;
      if (spec.choices === 'bool') {
        input = document.createElement('input');
        input.type = 'checkbox';
      } else if (spec.choices) {
        input = document.createElement('select');
        for (const c of spec.choices.split('|')) {
          const o = document.createElement('option');
          o.value = c;
          o.textContent = c;
          input.appendChild(o);
        }
      } else {
        input = document.createElement('input');
        input.type = 'number';
        input.step = 'any';
        input.min = String(spec.min);
        input.max = String(spec.max);
      }
      input.dataset.param = spec.name;
      input.addEventListener('change', () => changed(spec, input));
      label.appendChild(input);
      groups.get(spec.group).appendChild(label);
    }
  }

  function showParams(p) {
    for (const input of document.querySelectorAll('[data-param]')) {
      const v = p[input.dataset.param];
      if (input.type === 'checkbox') input.checked = Boolean(v);
      else input.value = String(v);
      input.removeAttribute('aria-invalid');
    }
  }

  /// A control's value, or an error naming the parameter.
  function valueOf(spec, input) {
    if (spec.choices === 'bool') return { value: input.checked };
    if (spec.choices) return { value: input.value };
    const text = input.value.trim();
    const v = Number(text);
    if (text === '' || !Number.isFinite(v)) return { error: spec.name + ": '" + input.value + "' is not a number" };
    if (v < spec.min || v > spec.max) return { error: spec.name + ' is ' + v + ': must be within [' + spec.min + ', ' + spec.max + '] (' + spec.help + ')' };
    return { value: v };
  }

  function changed(spec, input) {
    const r = valueOf(spec, input);
    if (r.error) {
      input.setAttribute('aria-invalid', 'true');
      showErrors([r.error + ' — the simulation goes on with ' + spec.name + ' = ' + params[spec.name]]);
      return;
    }
    const next = Object.assign({}, params, { [spec.name]: r.value });
    const res = call('sim_set', JSON.stringify(next));
    stats.sets++;
    if (res.errors) {
      input.setAttribute('aria-invalid', 'true');
      showErrors(res.errors.concat(['the simulation goes on with the previous values']));
      return;
    }
    input.removeAttribute('aria-invalid');
    showErrors([]);
    params = next;
    addEvent({ t: last ? last.t : 0, kind: 'change', message: spec.name + ' set to ' + r.value });
  }

  // ------------------------------------------------------------------ charts

  function initCharts() {
    const common = { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } } };
    charts.throughput = new Chart($('throughput-chart'), {
      type: 'line',
      data: { datasets: [
        { label: 'samples/s', data: [], borderColor: '#3b7dd8', pointRadius: 0, yAxisID: 'y', borderWidth: 1.5 },
        { label: 'goodput (interval)', data: [], borderColor: '#2a9d5f', pointRadius: 0, yAxisID: 'g', borderWidth: 1 },
        { label: 'goodput (since start)', data: [], borderColor: '#155e36', pointRadius: 0, yAxisID: 'g', borderWidth: 2 },
      ] },
      options: Object.assign({}, common, { parsing: false, scales: {
        x: { type: 'linear', title: { display: true, text: 'simulated hours' } },
        y: { beginAtZero: true, title: { display: true, text: 'samples/s' } },
        g: { position: 'right', min: 0, max: 1, title: { display: true, text: 'goodput' }, grid: { drawOnChartArea: false } },
      } }),
    });
    charts.step = new Chart($('step-chart'), {
      type: 'bar',
      data: { labels: ['whole run', 'last interval'], datasets: [
        { label: 'compute', data: [0, 0], backgroundColor: window.CohortTimeline.colorOf('compute') },
        { label: 'exposed communication', data: [0, 0], backgroundColor: window.CohortTimeline.colorOf('allreduce') },
        { label: 'waiting', data: [0, 0], backgroundColor: window.CohortTimeline.colorOf('comm_wait') },
      ] },
      options: Object.assign({}, common, { indexAxis: 'y', scales: { x: { stacked: true, title: { display: true, text: 'ms per step' } }, y: { stacked: true } } }),
    });
    charts.memory = new Chart($('memory-chart'), {
      type: 'bar',
      data: { labels: ['per worker'], datasets: ['params', 'grads', 'optimizer', 'activations'].map((k, i) => ({
        label: k, data: [0], backgroundColor: ['#3b7dd8', '#e0a030', '#8e5bd0', '#2a9d5f'][i] })) },
      options: Object.assign({}, common, { indexAxis: 'y', scales: { x: { stacked: true, title: { display: true, text: 'GiB' } }, y: { stacked: true } } }),
    });
    charts.interval = new Chart($('interval-chart'), {
      type: 'line',
      data: { datasets: [
        { label: 'simulated goodput', data: [], borderColor: '#155e36', pointRadius: 2 },
        { label: 'best (simulated)', data: [], borderColor: '#d33c3c', backgroundColor: '#d33c3c', pointRadius: 6, showLine: false },
        { label: 'Young/Daly sqrt(2 delta M)', data: [], borderColor: '#8e5bd0', borderDash: [4, 4], pointRadius: 0 },
      ] },
      options: Object.assign({}, common, { parsing: false, scales: {
        x: { type: 'logarithmic', title: { display: true, text: 'checkpoint interval (s)' } },
        y: { title: { display: true, text: 'goodput' } },
      } }),
    });
  }

  function drawCharts() {
    if (!last || !charts.throughput) return;
    const tp = [], gw = [], gc = [];
    for (const p of series) {
      const x = p[0] / 3600;
      if (finite(p[1])) tp.push({ x, y: p[1] });
      if (finite(p[3])) gw.push({ x, y: p[3] });
      if (finite(p[2])) gc.push({ x, y: p[2] });
    }
    charts.throughput.data.datasets[0].data = tp;
    charts.throughput.data.datasets[1].data = gw;
    charts.throughput.data.datasets[2].data = gc;
    charts.throughput.update('none');
    const ms = (v) => (finite(v) ? v * 1000 : 0);
    const st = last.step || {};
    const rs = last.recent_step || st;
    charts.step.data.datasets[0].data = [ms(st.compute_s), ms(rs.compute_s)];
    charts.step.data.datasets[1].data = [ms(st.exposed_comm_s), ms(rs.exposed_comm_s)];
    charts.step.data.datasets[2].data = [ms(st.waiting_s), ms(rs.waiting_s)];
    charts.step.update('none');
    const m = last.memory_per_worker || {};
    ['params', 'grads', 'optimizer', 'activations'].forEach((k, i) => {
      charts.memory.data.datasets[i].data = [finite(m[k]) ? m[k] / 2 ** 30 : 0];
    });
    charts.memory.update('none');
  }

  function drawSummary() {
    if (!last) return;
    $('clock').textContent = fmtClock(last.t);
    $('clock').dataset.t = String(last.t);
    $('samples-per-s').textContent = fmt(last.samples_per_s, 1);
    $('step-time').textContent = finite(last.step.step_s) ? (last.step.step_s * 1000).toFixed(1) + ' ms' : '–';
    $('efficiency').textContent = finite(last.scaling_efficiency) ? (last.scaling_efficiency * 100).toFixed(1) + ' %' : '–';
    $('goodput').textContent = finite(last.goodput) ? (last.goodput * 100).toFixed(2) + ' %' : '–';
    $('world').textContent = String(last.world) + (last.down ? ' (down)' : '');
    $('memory').textContent = fmtBytes(last.memory_per_worker.total);
    $('failures').textContent = String(last.totals.failures + last.totals.hangs);
    $('lost').textContent = fmtClock(last.totals.lost_work_s);
    const st = $('state');
    const state = finished ? 'finished' : running ? 'running' : 'paused';
    st.dataset.state = state;
    st.textContent = state;
  }

  // The sampled workers' segments in the timeline view the dashboard uses (web/timeline.js).
  function drawTimeline() {
    if (!timelineView) return;
    const rows = last && last.timeline ? last.timeline : [];
    const ids = last && last.timeline_workers ? last.timeline_workers : rows.map((_, i) => i);
    const t1 = last ? last.t : 0;
    const t0 = t1 - (last && last.memory ? last.memory.timeline_s : params ? params.timeline_s : 0);  // the budget's window
    const lanes = rows.map((segs, r) => ({
      id: ids[r], label: 'worker ' + ids[r],
      spans: segs.map(([a, b, state]) => Object.assign({ start: a, dur: b - a, args: { state } }, SPAN_OF[state] || { name: state, cat: 'compute' })),
    }));
    timelineView.setData({ lanes, range: rows.length ? [t0, t1] : null });
  }

  function addEvent(e) {
    const list = $('events');
    const li = document.createElement('li');
    li.dataset.kind = e.kind;
    li.textContent = fmtClock(e.t) + '  ' + e.message;
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 200) list.removeChild(list.lastChild);
  }

  // ------------------------------------------------------------------ running

  function start(p) {
    const res = call('sim_start', JSON.stringify(p));
    if (res.errors) {
      showErrors(res.errors);
      showNotice('');
      $('state').dataset.state = 'error';
      $('state').textContent = 'error';
      running = false;
      return res.errors;
    }
    stats.starts++;
    showErrors([]);
    params = Object.assign({}, p);
    showParams(params);
    series.length = 0;
    $('events').textContent = '';
    finished = false;
    running = true;
    advance(0);
    return [];
  }

  /// One slice of simulated time; the report replaces `last`, new series points and events append.
  function advance(seconds, withTimeline) {
    const t0 = performance.now();
    const r = call('sim_advance', seconds, withTimeline ? 1 : 0);
    // A slice with the timeline also pays for the timeline's JSON: timed apart, so that a large
    // timeline makes the timeline rarer rather than the slices shorter.
    if (withTimeline) stats.timelineAdvanceMs = performance.now() - t0;
    else stats.advanceMs = performance.now() - t0;
    stats.advances++;
    if (r.errors) {
      showErrors(r.errors);
      running = false;
      return;
    }
    for (const p of r.series_new) series.push(p);
    if (series.length > MAX_POINTS) series.splice(0, series.length - MAX_POINTS);
    for (const e of r.events_new) addEvent(e);
    if (!withTimeline && last && last.timeline) r.timeline = last.timeline;
    last = r;
    showNotice(r.notice);
    finished = r.finished;
    if (finished) running = false;
  }

  function frame(now) {
    stats.frames++;
    if (now - fpsWindow.t >= 1000) {
      stats.fps = (stats.frames - fpsWindow.frames) * 1000 / (now - fpsWindow.t);
      fpsWindow = { t: now, frames: stats.frames };
    }
    if (running) {
      // This frame's share of simulated time, cut down when the last slice ran over its budget.
      let slice = speed / 60;
      if (stats.advanceMs > FRAME_BUDGET_MS) slice *= FRAME_BUDGET_MS / stats.advanceMs;
      const wantTimeline = now - lastTimeline >= Math.max(TIMELINE_MS, 10 * stats.timelineAdvanceMs);
      advance(slice, wantTimeline);
      if (wantTimeline) {
        lastTimeline = now;
        const a = performance.now();
        drawTimeline();
        stats.timelineMs = performance.now() - a;
      }
      const b = performance.now();
      drawSummary();
      stats.summaryMs = performance.now() - b;
    }
    if (now - lastChart >= CHART_MS) {
      lastChart = now;
      const c = performance.now();
      drawCharts();
      stats.chartMs = performance.now() - c;
      drawSummary();
    }
    requestAnimationFrame(frame);
  }

  function findOptimum() {
    const text = $('optimum-text');
    const r = call('sim_optimum', JSON.stringify(params));
    if (r.errors) {
      text.textContent = r.errors.join('; ');
      return r;
    }
    charts.interval.data.datasets[0].data = r.curve.map((c) => ({ x: c.interval_s, y: c.goodput }));
    const best = r.curve.reduce((a, b) => (b.goodput > a.goodput ? b : a));
    charts.interval.data.datasets[1].data = [{ x: best.interval_s, y: best.goodput }];
    const ys = r.curve.map((c) => c.goodput);
    charts.interval.data.datasets[2].data = [{ x: r.young_daly_s, y: Math.min(...ys) }, { x: r.young_daly_s, y: Math.max(...ys) }];
    charts.interval.update('none');
    text.textContent = 'best simulated interval ' + r.best_interval_s.toFixed(0) + ' s (every ' + best.every + ' steps, goodput ' +
      (best.goodput * 100).toFixed(2) + ' %); Young/Daly sqrt(2 x ' + r.delta_s.toFixed(2) + ' s x ' + r.job_mtbf_s.toFixed(0) +
      ' s) = ' + r.young_daly_s.toFixed(0) + ' s';
    text.dataset.best = String(r.best_interval_s);
    text.dataset.youngDaly = String(r.young_daly_s);
    return r;
  }

  /// Where the page starts: #params=JSON, ?preset=NAME, the server's /params.json, or a preset.
  async function initialParams() {
    const hash = new URLSearchParams(location.hash.slice(1));
    const query = new URLSearchParams(location.search);
    const base = Object.assign({}, schema.defaults);
    if (hash.has('params')) {
      try {
        return Object.assign(base, JSON.parse(hash.get('params')));
      } catch (e) {
        showErrors(['the #params in the address are not JSON: ' + e.message]);
      }
    }
    const presetName = query.get('preset');
    if (presetName) {
      const p = schema.presets.find((x) => x.name === presetName);
      if (p) return Object.assign({}, p.params);
      showErrors(['no preset ' + presetName + ' (there are: ' + schema.presets.map((x) => x.name).join(', ') + ')']);
    }
    if (location.protocol.startsWith('http')) {
      try {
        const res = await fetch('params.json' + location.search, { cache: 'no-store' });
        if (res.ok) return Object.assign(base, await res.json());
      } catch (e) { /* no parameters from the server: a preset */ }
    }
    return Object.assign({}, schema.presets[0].params);
  }

  async function main() {
    core = await window.CohortSimCore();
    schema = call('sim_schema');
    const presetBox = $('preset');
    for (const p of schema.presets) {
      const o = document.createElement('option');
      o.value = p.name;
      o.textContent = p.title;
      presetBox.appendChild(o);
    }
    const custom = document.createElement('option');
    custom.value = '';
    custom.textContent = '(given)';
    presetBox.appendChild(custom);
    buildControls();
    timelineView = window.CohortTimeline.create($('timeline-view'), { canvasId: 'timeline', laneNoun: 'worker', outliers: false, empty: 'no workers on the timeline (timeline_workers)' });
    initCharts();
    presetBox.addEventListener('change', () => {
      const p = schema.presets.find((x) => x.name === presetBox.value);
      if (p) start(Object.assign({}, p.params));
    });
    $('restart').addEventListener('click', () => start(params));
    $('pause').addEventListener('click', () => {
      running = !running && !finished;
      $('pause').textContent = running ? 'pause' : 'resume';
      drawSummary();
    });
    $('speed').addEventListener('change', () => { speed = Number($('speed').value); });
    $('optimum').addEventListener('click', findOptimum);
    const p = await initialParams();
    const match = schema.presets.find((x) => JSON.stringify(x.params) === JSON.stringify(p));
    presetBox.value = match ? match.name : '';
    start(p);
    drawCharts();
    drawSummary();
    document.body.dataset.ready = 'true';
    requestAnimationFrame(frame);
  }

  // For tests and scripts: the page's state, and the same steps the controls take.
  window.cohortSim = {
    stats,
    charts,
    get params() { return Object.assign({}, params); },
    get report() { return last; },
    get series() { return series.slice(); },
    get timeline() { return timelineView; },
    get running() { return running; },
    pause() { running = false; $('pause').textContent = 'resume'; drawSummary(); },
    resume() { running = !finished; $('pause').textContent = 'pause'; },
    /// Runs (paused or not) until simulated time `t`, in frame-sized slices, and redraws.
    runTo(t) {
      while (last && last.t < t && !finished) advance(Math.min(t - last.t, 3600), false);
      advance(0, true);
      drawTimeline();
      drawCharts();
      drawSummary();
      return last.t;
    },
    start,
    findOptimum,
  };

  document.addEventListener('DOMContentLoaded', () => {
    main().catch((e) => {
      showErrors(['the simulator could not start: ' + (e && e.message ? e.message : e)]);
      $('state').dataset.state = 'error';
      $('state').textContent = 'error';
    });
  });
})();
