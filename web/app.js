// cohort dashboard: draws /api/state, then follows /api/stream (server-sent events) without
// reloading. No framework; charts by Chart.js (embedded from Debian's libjs-chart.js) through
// charts.js, numbers written by format.js (both loaded before this file by index.html).
// Messages (docs/monitoring.md): "metrics" (one worker step), "event" (an event line), "state"
// ({job, ranks}: the job state or the rank grid changed), "resync" (messages were lost: refetch).
'use strict';

(function () {
  const params = new URLSearchParams(window.location.search);
  const token = params.get('token');
  const query = token ? '?token=' + encodeURIComponent(token) : '';

  const MAX_POINTS = 2000;   // job-level chart points kept (as the hub's history_points)
  const RANK_HISTORY = 200;  // per-rank step records kept
  const WINDOW = 20;         // steps behind the per-rank step-time view (as the straggler window)
  const MAX_EVENTS = 500;
  const SHOWN_EVENTS = 300;
  const RENDER_MS = 300;     // at most this often the page redraws
  const SMOOTH = 10;         // steps in the charts' trailing mean

  // Phases of a step: busy ones in colour, waiting for the others in grey (see index.html).
  const PHASES = [
    { key: 'data', label: 'data', color: '#8e6cc9' },
    { key: 'forward', label: 'forward', color: '#2f6fd0' },
    { key: 'backward', label: 'backward', color: '#2f9e5b' },
    { key: 'optimizer', label: 'optimizer', color: '#d98b00' },
    { key: 'other', label: 'other', color: '#9aa2b1' },
    { key: 'comm_wait', label: 'comm wait', color: '#d5d9e0' },
  ];
  const FINAL_JOB_STATES = new Set(['succeeded', 'failed', 'interrupted']);

  const model = {
    job: {},
    ranks: new Map(),        // rank -> rank object (as in the snapshot)
    history: [],             // [{step, t, loss, samples_per_s}] sorted by step
    rankHistory: new Map(),  // rank -> [{step, step_s, phases}]
    events: [],              // oldest first
    pending: new Map(),      // step -> {loss: Map(rank -> loss), sps: Map(rank -> samples/s), t}
  };
  let loaded = false;
  let loading = null;
  let again = false;
  // For tests: how often the stream said we fell behind, snapshots applied, one on its way.
  const stats = { resyncs: 0, snapshots: 0, loading: false };
  let buffered = [];
  let eventsDirty = true;
  let renderTimer = null;
  const charts = {};

  const $ = (id) => document.getElementById(id);

  const { num, defined, fmtNumber, fmtMs, fmtBytes, fmtDuration, fmtTime, median } = window.CohortFormat;
  const Charts = window.CohortCharts;
  const Timeline = window.CohortTimelinePanel;  // the timeline panel (timeline_panel.js)

  // ---------------------------------------------------------------- model updates

  function rankOf(r) {
    const key = Number(r);
    let o = model.ranks.get(key);
    if (!o) {
      o = { rank: key, state: 'starting' };
      model.ranks.set(key, o);
    }
    return o;
  }

  // Keeps a step-sorted list; a step at or below the last one (a restart resumed from a
  // checkpoint, or a message seen twice) replaces the tail from that step on.
  function appendByStep(list, point, cap) {
    while (list.length > 0 && list[list.length - 1].step >= point.step) list.pop();
    list.push(point);
    if (list.length > cap) list.splice(0, list.length - cap);
  }

  function addHistoryPoint(p) {
    appendByStep(model.history, p, MAX_POINTS);
  }

  function applySnapshot(s) {
    model.job = s.job || {};
    model.ranks = new Map();
    for (const r of s.ranks || []) model.ranks.set(Number(r.rank), Object.assign({}, r));
    model.history = [];
    for (const p of s.history || []) {
      if (defined(p.step)) addHistoryPoint({ step: p.step, t: p.t, loss: num(p.loss), samples_per_s: num(p.samples_per_s) });
    }
    model.rankHistory = new Map();
    const rh = s.rank_history || {};
    for (const key of Object.keys(rh)) {
      const list = [];
      for (const rec of rh[key] || []) appendByStep(list, rec, RANK_HISTORY);
      model.rankHistory.set(Number(key), list);
    }
    model.events = (s.events || []).slice(-MAX_EVENTS);
    model.pending = new Map();
    Timeline.snapshot(s);
    eventsDirty = true;
  }

  function applyMetrics(m) {
    if (!defined(m.rank)) return;
    const r = rankOf(m.rank);
    if (!r.state || r.state === 'starting' || r.state === 'restarting') r.state = 'running';
    for (const k of ['node', 'step', 'step_s', 'phases', 'samples_per_s', 'scalars', 'grad_norm', 'rss_bytes', 'cuda_bytes', 'busbw', 't']) {
      if (defined(m[k])) r[k] = m[k];
    }
    if (defined(m.world_size)) model.job.world_size = m.world_size;
    if (!defined(m.step)) return;
    Timeline.metrics(m);

    let hist = model.rankHistory.get(Number(m.rank));
    if (!hist) model.rankHistory.set(Number(m.rank), (hist = []));
    appendByStep(hist, { step: m.step, step_s: m.step_s, phases: m.phases || {} }, RANK_HISTORY);

    let top = 0;
    for (const o of model.ranks.values()) if (defined(o.step) && o.step > top) top = o.step;
    model.job.step = top;

    // Job-level point once every rank reported this step: mean loss (NaN if any is), summed
    // throughput; a step some rank never reports is drawn with what it has once 8 newer came (as
    // the hub does for its history).
    let p = model.pending.get(m.step);
    if (!p) model.pending.set(m.step, (p = { loss: new Map(), sps: new Map(), t: m.t }));
    p.loss.set(m.rank, m.scalars ? num(m.scalars.loss) : undefined);
    p.sps.set(m.rank, num(m.samples_per_s));
    p.t = Math.max(p.t || 0, num(m.t) || 0);
    const world = Number(model.job.world_size) || model.ranks.size;
    if (p.loss.size >= world) flushPending(m.step, false);
    for (const s of [...model.pending.keys()]) if (s < m.step - 8) flushPending(s, true);
  }

  // `late`: a step older than the newest ones drawn, put in its place (not a restart's rewind).
  function flushPending(step, late) {
    const p = model.pending.get(step);
    model.pending.delete(step);
    if (!p) return;
    const losses = [...p.loss.values()].filter(defined);
    const rates = [...p.sps.values()].filter(defined);
    const point = {
      step,
      t: p.t,
      loss: losses.length ? losses.reduce((a, b) => a + b, 0) / losses.length : undefined,
      samples_per_s: rates.length ? rates.reduce((a, b) => a + b, 0) : undefined,
    };
    if (!late) {
      addHistoryPoint(point);
      return;
    }
    const h = model.history;
    let i = h.length;
    while (i > 0 && h[i - 1].step > step) i--;
    if (i > 0 && h[i - 1].step === step) h[i - 1] = point;
    else h.splice(i, 0, point);
  }

  function applyEvent(e) {
    if (e.kind === 'round_started' || e.kind === 'restart') model.pending = new Map();  // a new round's steps
    model.events.push(e);
    if (model.events.length > MAX_EVENTS) model.events.splice(0, model.events.length - MAX_EVENTS);
    eventsDirty = true;
  }

  function applyState(s) {
    if (s.job) Object.assign(model.job, s.job);
    if (Array.isArray(s.ranks)) {
      const seen = new Set();
      for (const r of s.ranks) {
        const key = Number(r.rank);
        seen.add(key);
        // The grid's fields replace ours; a field absent from it (straggler, reason) is cleared.
        const o = rankOf(key);
        for (const k of ['state', 'reason', 'straggler', 'slow_phase', 'node']) if (!(k in r)) delete o[k];
        Object.assign(o, r);
      }
      for (const key of [...model.ranks.keys()]) if (!seen.has(key)) model.ranks.delete(key);
    }
  }

  function apply(name, data) {
    if (name === 'metrics') applyMetrics(data);
    else if (name === 'event') applyEvent(data);
    else if (name === 'state') applyState(data);
  }

  // ---------------------------------------------------------------- rendering

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  function latestHistory(key) {
    for (let i = model.history.length - 1; i >= 0; i--) {
      const v = model.history[i][key];
      if (defined(v)) return v;
    }
    return undefined;
  }

  function latestTime() {
    let t;
    const consider = (v) => {
      const n = num(v);
      if (defined(n) && Number.isFinite(n) && (!defined(t) || n > t)) t = n;
    };
    for (const r of model.ranks.values()) consider(r.t);
    const lastEvent = model.events[model.events.length - 1];
    if (lastEvent) consider(lastEvent.t);
    const lastPoint = model.history[model.history.length - 1];
    if (lastPoint) consider(lastPoint.t);
    return t;
  }

  function renderSummary() {
    const job = model.job;
    const state = job.state || 'unknown';
    const badge = $('job-state');
    setText(badge, state);
    if (badge.dataset.state !== state) badge.dataset.state = state;
    setText($('job-name'), job.name || '');
    if (job.name) document.title = 'cohort · ' + job.name + ' · ' + state;
    setText($('step'), defined(job.step) ? String(job.step) : '–');
    setText($('world-size'), defined(job.world_size) ? String(job.world_size) : '–');
    setText($('restarts'), defined(job.restarts) ? String(job.restarts) : '0');
    let loss = latestHistory('loss');
    if (!defined(loss)) {
      const r0 = model.ranks.get(0);
      loss = r0 && r0.scalars ? num(r0.scalars.loss) : undefined;
    }
    setText($('loss'), fmtNumber(loss, 4));
    let sps = latestHistory('samples_per_s');
    if (!defined(sps)) sps = num(job.samples_per_s);
    setText($('throughput'), fmtNumber(sps, 0));
    setText($('step-time'), fmtMs(median([...model.ranks.values()].map((r) => num(r.step_s)))));
    // Up to now while the job runs and its data is fresh; otherwise up to its last record (a
    // finished job, or the log of one that was killed, read by `cohort dashboard`).
    const start = num(job.started_at);
    const lastT = latestTime();
    let end = Date.now() / 1000;
    if (FINAL_JOB_STATES.has(state) || (defined(lastT) && end - lastT > 120)) end = lastT;
    setText($('elapsed'), defined(start) && defined(end) ? fmtDuration(end - start) : '–');
  }

  function slowPhase(r) {
    if (r.slow_phase) return String(r.slow_phase);
    const s = r.straggler;
    if (s && typeof s === 'object' && s.phase) return String(s.phase);
    if (typeof s === 'string' && s) return s;
    if (r.phase) return String(r.phase);
    return '';
  }

  function renderRanks() {
    const grid = $('ranks');
    const keys = [...model.ranks.keys()].sort((a, b) => a - b);
    const wanted = new Set(keys.map(String));
    for (const el of [...grid.children]) if (!wanted.has(el.dataset.rank)) el.remove();
    let before = null;
    for (let i = keys.length - 1; i >= 0; i--) {
      const r = model.ranks.get(keys[i]);
      let el = grid.querySelector('[data-rank="' + keys[i] + '"]');
      if (!el) {
        el = document.createElement('div');
        el.className = 'rank';
        el.dataset.rank = String(keys[i]);
        el.innerHTML =
          '<div class="rank-head"><span class="rank-id"></span><span class="rank-state"></span></div>' +
          '<div class="rank-detail"></div><div class="rank-detail rank-detail2"></div><div class="rank-note"></div>';
      }
      if (el.nextSibling !== before || el.parentNode !== grid) grid.insertBefore(el, before);
      before = el;

      const state = r.state || 'starting';
      if (el.dataset.state !== state) el.dataset.state = state;
      const phase = state === 'slow' ? slowPhase(r) : '';
      if (phase) el.dataset.slowPhase = phase;
      else delete el.dataset.slowPhase;

      setText(el.querySelector('.rank-id'), 'rank ' + r.rank + (defined(r.node) ? ' · node ' + r.node : ''));
      setText(el.querySelector('.rank-state'), state);
      const loss = r.scalars ? r.scalars.loss : undefined;
      setText(el.querySelector('.rank-detail'),
        'step ' + (defined(r.step) ? r.step : '–') + ' · ' + fmtMs(r.step_s) + (defined(loss) ? ' · loss ' + fmtNumber(loss, 4) : ''));
      const extra = [];
      if (defined(r.samples_per_s)) extra.push(fmtNumber(r.samples_per_s, 0) + ' samples/s');
      if (defined(r.rss_bytes)) extra.push(fmtBytes(r.rss_bytes));
      if (defined(r.busbw)) extra.push(fmtBytes(r.busbw) + '/s busbw');
      setText(el.querySelector('.rank-detail2'), extra.join(' · '));
      let note = '';
      if (state === 'slow') note = 'straggler' + (phase ? ': ' + phase + ' slow' : '');
      else if (state === 'failed') note = r.reason ? String(r.reason) : 'failed';
      else if (state === 'stalled') note = 'no step progress';
      setText(el.querySelector('.rank-note'), note);
      el.title = note;
    }
  }

  function eventSeverity(e) {
    if (e.kind === 'failure') return 'bad';
    if (e.kind === 'anomaly') return e.anomaly === 'straggler' ? 'warn' : 'bad';
    if (e.kind === 'restart') return 'warn';
    if (e.kind === 'finished') return e.state === 'succeeded' ? 'good' : 'bad';
    return 'info';
  }

  function renderEvents() {
    if (!eventsDirty) return;
    eventsDirty = false;
    const list = $('events');
    const shown = model.events.slice(-SHOWN_EVENTS).reverse();  // newest first
    const frag = document.createDocumentFragment();
    for (const e of shown) {
      const li = document.createElement('li');
      li.className = 'event';
      li.dataset.kind = String(e.kind || '');
      if (e.anomaly) li.dataset.anomaly = String(e.anomaly);
      if (defined(e.rank)) li.dataset.eventRank = String(e.rank);
      li.dataset.severity = eventSeverity(e);
      const time = document.createElement('span');
      time.className = 'time';
      time.textContent = fmtTime(e.t);
      const kind = document.createElement('span');
      kind.className = 'kind';
      kind.textContent = (e.kind === 'anomaly' && e.anomaly ? String(e.anomaly) : String(e.kind || '')).replace(/_/g, ' ');
      const msg = document.createElement('span');
      msg.className = 'message';
      msg.textContent = String(e.message || '');
      li.append(time, kind, msg);
      frag.append(li);
    }
    list.replaceChildren(frag);
    setText($('event-count'), model.events.length ? String(model.events.length) : '');
  }

  function initCharts() {
    if (!window.Chart) return;
    charts.loss = Charts.lineChart($('loss-chart'), 'loss', '#2f6fd0', 'rgba(47, 111, 208, 0.3)', false, SMOOTH);
    charts.loss.data.datasets.push({ type: 'scatter', label: 'anomaly', data: [], pointRadius: 5, pointStyle: 'triangle', borderColor: '#c8323c', backgroundColor: '#c8323c' });
    charts.throughput = Charts.lineChart($('throughput-chart'), 'samples/s', '#2f9e5b', 'rgba(47, 158, 91, 0.3)', true, SMOOTH);
    charts.stepTime = Charts.stepTimeChart($('step-time-chart'), PHASES, (i) => Boolean(charts.slowTicks && charts.slowTicks[i]));
  }

  function renderCharts() {
    if (!charts.loss) return;
    const { lossPoints, ratePoints, marks } = Charts.jobSeries(model.history, model.events);
    charts.loss.data.datasets[0].data = lossPoints;
    charts.loss.data.datasets[1].data = Charts.smooth(lossPoints, SMOOTH);
    charts.loss.data.datasets[2].data = marks;
    charts.loss.update('none');
    charts.throughput.data.datasets[0].data = ratePoints;
    charts.throughput.data.datasets[1].data = Charts.smooth(ratePoints, SMOOTH);
    charts.throughput.update('none');
    $('loss-chart').dataset.points = String(lossPoints.length);
    $('throughput-chart').dataset.points = String(ratePoints.length);

    const { labels, slow, per } = Charts.phaseMeans(model.ranks, model.rankHistory, PHASES, WINDOW);
    charts.slowTicks = slow;
    charts.stepTime.data.labels = labels;
    PHASES.forEach((p, i) => { charts.stepTime.data.datasets[i].data = per[i]; });
    charts.stepTime.update('none');
  }

  function render() {
    renderTimer = null;
    renderSummary();
    renderRanks();
    renderEvents();
    renderCharts();
    Timeline.render(model.ranks.keys());
  }

  function scheduleRender() {
    if (renderTimer === null) renderTimer = setTimeout(render, RENDER_MS);
  }

  // ---------------------------------------------------------------- data flow

  async function loadState() {
    if (loading) {  // a snapshot already on its way may predate what made us ask: fetch again after it
      again = true;
      return loading;
    }
    stats.loading = true;
    loading = (async () => {
      for (let attempt = 0; ; ) {
        // The hub puts a message in its state before it sends it: the snapshot asked for now
        // holds all received so far, so only those that come during the fetch are kept.
        buffered = [];
        again = false;
        let snapshot;
        try {
          const res = await fetch('api/state' + query, { cache: 'no-store' });
          if (!res.ok) throw new Error('HTTP ' + res.status);
          snapshot = await res.json();
        } catch (err) {
          setText($('footer'), 'cannot load the job state: ' + err.message + '; retrying');
          await new Promise((r) => setTimeout(r, Math.min(5000, 500 * ++attempt)));
          continue;
        }
        // Told meanwhile that messages were lost (a resync, too many buffered): this snapshot and
        // what came after it would be drawn with a gap between them; the next one holds them all.
        if (again) continue;
        applySnapshot(snapshot);
        stats.snapshots++;
        break;
      }
      loaded = true;
      // Messages that came while the snapshot was on its way; those it already holds replace
      // themselves (appendByStep) or are events seen twice, which we drop by their time and kind.
      const seen = new Set(model.events.map((e) => e.t + '|' + e.kind + '|' + e.message));
      for (const [name, data] of buffered) {
        if (name === 'event' && seen.has(data.t + '|' + data.kind + '|' + data.message)) continue;
        apply(name, data);
      }
      buffered = [];
      setText($('footer'), '');
      render();
      document.body.dataset.ready = 'true';
      loading = null;
      stats.loading = false;
    })();
    return loading;
  }

  function connect() {
    if (!window.EventSource) return;
    const source = new EventSource('api/stream' + query);
    let hadError = false;
    const conn = $('connection');
    source.onopen = () => {
      conn.dataset.connected = 'true';
      setText(conn, 'live');
      if (hadError) {  // messages may have been missed while away
        hadError = false;
        loaded = false;
        loadState();
      }
    };
    source.onerror = () => {
      hadError = true;
      conn.dataset.connected = 'false';
      setText(conn, FINAL_JOB_STATES.has(model.job.state) ? 'disconnected (job ended)' : 'reconnecting…');
      // The browser retries by itself after a network error, but gives up on an HTTP error (a
      // 503 when too many pages are open): then a new stream in a while, and a fresh state.
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(() => {
          connect();
          loaded = false;
          loadState();
        }, 5000);
      }
    };
    for (const name of ['metrics', 'event', 'state']) {
      source.addEventListener(name, (ev) => {
        let data;
        try {
          data = JSON.parse(ev.data);
        } catch (err) {
          return;
        }
        if (!loaded) {
          // Too many to keep while the snapshot is on its way: dropping the oldest would leave a
          // gap between it and the rest (seen: 129 loss points missing after a burst). Drop them
          // all and fetch a newer snapshot after this one instead; it holds what was dropped.
          if (buffered.length >= 10000) {
            buffered = [];
            again = true;
          }
          buffered.push([name, data]);
          return;
        }
        apply(name, data);
        scheduleRender();
      });
    }
    source.addEventListener('resync', () => {
      stats.resyncs++;
      loaded = false;
      loadState();
    });
  }

  function start() {
    initCharts();
    Timeline.init($('timeline-view'));
    connect();  // first, so that nothing between the snapshot and the stream is lost
    loadState();
    setInterval(scheduleRender, 1000);  // the elapsed time (and all parts drawn from one state)
  }

  window.cohortDashboard = { model, charts, stats, timeline: Timeline, reload: loadState };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
