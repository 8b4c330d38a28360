// cohort's timeline view (issue 49), shared by the dashboard (web/timeline_panel.js feeds it the
// ranks' step spans) and the simulator's page (web/sim/sim.js feeds it the sampled workers): one
// lane per rank or worker, sub-lanes compute / comm / io, on one clock; zoom with the wheel or the
// buttons, pan by dragging, click a span for its details. Canvas only, no library, no inline script
// or style (the pages' CSP). A span: {name, cat, start, dur, step, args} with start in seconds on
// the lanes' common clock. window.CohortTimeline.create(container, options) returns the view.
'use strict';

(function () {
  const CATS = ['compute', 'comm', 'io'];
  // One colour per span name; the waits in grey, I/O in reds, communication in teal and blues.
  const COLORS = {
    data: '#8e6cc9', forward: '#2f6fd0', backward: '#2f9e5b', optimizer: '#d98b00', comm_wait: '#b3bac7',
    bucket: '#13a1b5', allreduce: '#13a1b5', send: '#5c6bc0', recv: '#7e57c2', compute: '#3b7dd8',
    ckpt_capture: '#c2185b', ckpt_write: '#8e244d', snapshot_copy: '#e57399', checkpoint: '#8e244d',
    recovery: '#d33c3c', failed: '#d33c3c', restarting: '#f08a8a',
  };
  const ORDER = Object.keys(COLORS);
  const GUTTER = 112;   // lane labels, CSS pixels
  const AXIS = 20;
  const LANE_GAP = 5;
  // A span this much longer than the typical one of its kind on the view (and 2 ms, and 5 % of a
  // step, more) is outlined in red: the straggler's long phase, a late bucket, a slow checkpoint.
  // Waits are the others' symptom, not a cause: never outlined; nor is a bucket long on some ranks
  // only (it waited for a straggler's launch), only one long on every rank.
  const OUTLIER_FACTOR = 2;
  const OUTLIER_MIN_S = 0.002;
  const OUTLIER_STEP_SHARE = 0.05;

  function colorOf(name) {
    if (COLORS[name]) return COLORS[name];
    let h = 0;
    for (const c of String(name)) h = (h * 31 + c.charCodeAt(0)) % 360;
    return 'hsl(' + h + ', 45%, 55%)';
  }

  function fmtS(s) {
    const a = Math.abs(s);
    if (a >= 10) return s.toFixed(1) + ' s';
    if (a >= 1) return s.toFixed(3) + ' s';
    if (a >= 0.9995e-3) return (s * 1e3).toFixed(a >= 0.1 ? 1 : 2) + ' ms';
    return (s * 1e6).toFixed(0) + ' µs';
  }

  function niceStep(range, count) {
    const raw = range / Math.max(1, count);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function median(v) {
    if (!v.length) return NaN;
    const s = [...v].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // options: {canvasId, outliers (false: none outlined), maxLanes (64: past it a sample), steps: [choices] and defaultSteps (a "last N steps" select, calling
  // onSteps(n)), laneNoun ("rank"), stepNoun ("step"), empty (the text when there is nothing)}
  function create(container, options) {
    const o = Object.assign({ laneNoun: 'rank', empty: 'no spans yet' }, options || {});
    container.classList.add('tl');
    const bar = el('div', 'tl-bar');
    let select = null;
    if (o.steps) {
      const label = el('label', 'tl-steps', 'last ');
      select = el('select');
      select.id = (o.canvasId || 'timeline') + '-steps';
      for (const n of o.steps) {
        const opt = el('option', null, String(n));
        opt.value = String(n);
        if (n === o.defaultSteps) opt.selected = true;
        select.append(opt);
      }
      label.append(select, document.createTextNode(' steps'));
      bar.append(label);
    }
    const buttons = {};
    for (const [key, text, title] of [['in', '+', 'zoom in'], ['out', '−', 'zoom out'], ['fit', 'fit', 'show all (and follow)']]) {
      const b = el('button', 'tl-zoom', text);
      b.type = 'button';
      b.title = title;
      b.dataset.zoom = key;
      buttons[key] = b;
      bar.append(b);
    }
    const range = el('span', 'tl-range');
    const legend = el('span', 'tl-legend');
    bar.append(range, legend);
    const box = el('div', 'tl-box');
    const canvas = el('canvas', 'tl-canvas');
    if (o.canvasId) canvas.id = o.canvasId;
    box.append(canvas);
    const details = el('div', 'tl-details');
    details.hidden = true;
    container.append(bar, box, details);

    const view = {
      lanes: [], total: 0, marks: [], range: null,  // what to draw (setData; lanes: at most maxLanes of total)
      v0: 0, v1: 1, follow: true,             // the visible window; follow: the whole data
      drawn: [], selected: null, draws: 0,
      outliers: 0, picked: 0,                 // spans framed on the lanes drawn; lanes sampled for their outliers
    };

    // data: {lanes: [{id, label, spans}], marks: [{t, label}], range: [t0, t1] (optional: else the spans')}
    view.setData = function (data) {
      // Past maxLanes (64) lanes, a sample: the lanes whose own work (compute, io) has the largest
      // outliers first (up to a quarter: the stragglers, not the others' late buckets), then lanes
      // spread evenly over the rest, in their order.
      const all = data.lanes || [];
      const max = o.maxLanes || 64;
      view.total = all.length;
      view.lanes = all;
      markOutliers();  // over every lane: the usual span of a kind is the quickest lane's
      view.picked = 0;
      if (all.length > max) {
        const score = (l) => Math.max(0, ...l.spans.filter((sp) => sp.cat !== 'comm').map((sp) => sp.outlier || 0));
        const worst = all.map((l) => [score(l), l]).filter(([v]) => v > 0).sort((a, b) => b[0] - a[0]);
        const pick = new Set(worst.slice(0, max >> 2).map(([, l]) => l));
        view.picked = pick.size;
        const rest = all.filter((l) => !pick.has(l));
        const want = max - pick.size;
        for (let i = 0; i < want; i++) pick.add(rest[Math.floor(((i + 1) * rest.length) / want) - 1]);
        view.lanes = all.filter((l) => pick.has(l));
      }
      // The framed spans on the lanes drawn.
      view.outliers = 0;
      for (const lane of view.lanes) for (const s of lane.spans) if (s.outlier) view.outliers++;
      view.marks = data.marks || [];
      view.range = data.range || null;
      if (view.selected && !view.lanes.some((l) => l.spans.includes(view.selected.span))) {
        // The selected span left the window of steps: keep its details, drop the highlight.
        view.selected = Object.assign({}, view.selected, { gone: true });
      }
      view.draw();
    };

    function dataRange() {
      if (view.range) return view.range;
      let a = Infinity, b = -Infinity;
      for (const lane of view.lanes) {
        for (const s of lane.spans) {
          a = Math.min(a, s.start);
          b = Math.max(b, s.start + s.dur);
        }
      }
      if (!(b > a)) return null;
      const pad = (b - a) * 0.01;
      return [a - pad, b + pad];
    }

    // Against the lane (rank) where that kind is quickest (its median there): with two ranks, a
    // straggler's long phase is half of all, and a median over every span would hide it.
    function markOutliers() {
      const byKind = new Map();  // kind -> lane -> spans
      for (const lane of view.lanes) {
        for (const s of lane.spans) {
          s.outlier = 0;
          if (s.name === 'comm_wait' || o.outliers === false) continue;
          const key = s.name + (s.name === 'bucket' && s.args && s.args.index !== undefined ? '#' + s.args.index : '');
          if (!byKind.has(key)) byKind.set(key, new Map());
          const per = byKind.get(key);
          if (!per.has(lane)) per.set(lane, []);
          per.get(lane).push(s);
        }
      }
      // ... and longer by at least 5 % of a step (the median over the lanes' steps), so that a
      // busy machine's noise in a 0.1 ms phase is no outlier.
      const steps = new Map();
      for (const lane of view.lanes) {
        for (const s of lane.spans) {
          if (s.cat !== 'compute' || s.step === undefined) continue;
          const key = lane.id + '/' + s.step;
          steps.set(key, (steps.get(key) || 0) + s.dur);
        }
      }
      const minExtra = Math.max(OUTLIER_MIN_S, OUTLIER_STEP_SHARE * (median([...steps.values()]) || 0));
      for (const per of byKind.values()) {
        const all = [...per.values()].flat();
        if (all.length < 3) continue;
        const base = Math.min(...[...per.values()].map((list) => median(list.map((s) => s.dur))));
        for (const s of all) s.outlier = s.dur > OUTLIER_FACTOR * base && s.dur - base >= minExtra ? s.dur / base : 0;
      }
      // A bucket is late when it was long on every rank (the collective itself); long on some
      // only, it waited for a late launch (a straggler's): a symptom, like the waits.
      const collective = new Map();  // step#index -> spans
      for (const [key, per] of byKind) {
        if (!key.startsWith('bucket')) continue;
        for (const s of [...per.values()].flat()) {
          const k = s.step + '/' + key;
          if (!collective.has(k)) collective.set(k, []);
          collective.get(k).push(s);
        }
      }
      for (const list of collective.values()) {
        if (list.some((s) => !s.outlier)) for (const s of list) s.outlier = 0;
      }
    }

    function layout(cssWidth) {
      const n = view.lanes.length;
      const sub = n <= 8 ? 13 : n <= 24 ? 7 : n <= 64 ? 4 : 2;
      const laneH = CATS.length * sub;
      const gap = n <= 24 ? LANE_GAP : 2;
      return { sub, laneH, gap, width: cssWidth, height: AXIS + n * (laneH + gap) + 2 };
    }

    function drawLegend() {
      const names = new Set();
      for (const lane of view.lanes) for (const s of lane.spans) names.add(s.name);
      const sorted = [...names].sort((a, b) => (ORDER.indexOf(a) + 1 || 99) - (ORDER.indexOf(b) + 1 || 99) || (a < b ? -1 : 1));
      const key = sorted.join(',');
      if (legend.dataset.names === key) return;
      legend.dataset.names = key;
      legend.replaceChildren();
      for (const name of sorted) {
        const item = el('span', 'tl-key');
        item.dataset.name = name;
        const sw = el('i');
        sw.style.background = colorOf(name);  // CSSOM, allowed by style-src 'self'
        item.append(sw, document.createTextNode(name.replace(/_/g, ' ')));
        legend.append(item);
      }
      if (o.outliers === false) return;
      const out = el('span', 'tl-key tl-key-outlier');
      out.append(el('i'), document.createTextNode('≥ ' + OUTLIER_FACTOR + '× the usual'));
      legend.append(out);
    }

    view.draw = function () {
      view.draws++;
      drawLegend();
      const dr = dataRange();
      if (view.follow && dr) [view.v0, view.v1] = dr;
      const cssW = Math.max(200, box.clientWidth || 800);
      const L = layout(cssW);
      const dpr = window.devicePixelRatio || 1;
      if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(L.height * dpr)) {
        canvas.width = Math.round(cssW * dpr);
        canvas.height = Math.round(L.height * dpr);
        canvas.style.height = L.height + 'px';
      }
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, cssW, L.height);
      ctx.font = '11px system-ui, sans-serif';
      ctx.textBaseline = 'middle';
      view.drawn = [];
      canvas.dataset.lanes = String(view.lanes.length);
      if (!dr) {
        ctx.fillStyle = '#667';
        ctx.fillText(o.empty, GUTTER, AXIS + 12);
        canvas.dataset.spans = '0';
        range.textContent = '';
        return;
      }
      const v0 = view.v0, v1 = view.v1;
      const plotW = cssW - GUTTER - 4;
      const px = plotW / (v1 - v0);
      const X = (t) => GUTTER + (t - v0) * px;
      range.textContent = fmtS(v1 - v0) + ' shown' + (view.follow ? '' : ' (zoomed: fit to follow)') +
        (view.total > view.lanes.length ? '; ' + view.lanes.length + ' of ' + view.total + ' ' + o.laneNoun + 's, ' +
          (view.picked ? view.picked + ' with the longest outliers, the rest spread evenly' : 'spread evenly') : '');

      // The axis: time from the view's start; step starts as dashed lines.
      const tick = niceStep(v1 - v0, Math.max(2, Math.floor(plotW / 90)));
      ctx.fillStyle = '#556';
      ctx.strokeStyle = '#e3e6ec';
      ctx.lineWidth = 1;
      for (let k = 0; v0 + k * tick <= v1; k++) {
        const x = Math.round(X(v0 + k * tick)) + 0.5;
        ctx.beginPath();
        ctx.moveTo(x, AXIS - 4);
        ctx.lineTo(x, L.height);
        ctx.stroke();
        ctx.fillText(k ? '+' + fmtS(k * tick) : '0', x + 2, 7);
      }
      ctx.setLineDash([3, 3]);
      ctx.strokeStyle = '#9aa2b1';
      let lastLabel = -Infinity;
      for (const m of view.marks) {
        if (m.t < v0 || m.t > v1) continue;
        const x = Math.round(X(m.t)) + 0.5;
        ctx.beginPath();
        ctx.moveTo(x, AXIS - 6);
        ctx.lineTo(x, L.height);
        ctx.stroke();
        if (m.label && x - lastLabel > 60) {
          ctx.fillText(m.label, x + 2, AXIS - 5);
          lastLabel = x;
        }
      }
      ctx.setLineDash([]);

      let count = 0;
      view.lanes.forEach((lane, li) => {
        const top = AXIS + li * (L.laneH + L.gap);
        ctx.fillStyle = li % 2 ? '#fafbfc' : '#f1f3f6';
        ctx.fillRect(0, top, cssW, L.laneH);
        ctx.fillStyle = '#1d2330';
        ctx.fillText(lane.label, 4, top + Math.min(L.laneH / 2, 8));
        if (L.sub >= 10) {
          ctx.fillStyle = '#889';
          ctx.textAlign = 'right';
          CATS.forEach((c, ci) => ctx.fillText(c, GUTTER - 4, top + ci * L.sub + L.sub / 2));
          ctx.textAlign = 'left';
        }
        ctx.save();
        ctx.beginPath();
        ctx.rect(GUTTER, top, plotW, L.laneH);
        ctx.clip();
        // Overlapping spans of one sub-lane (buckets in flight together) share it in two tracks.
        const ends = CATS.map(() => [-Infinity, -Infinity]);
        const split = CATS.map(() => false);
        const sorted = [...lane.spans].sort((a, b) => a.start - b.start);
        const tracks = sorted.map((s) => {
          const ci = Math.max(0, CATS.indexOf(s.cat));
          const tr = ends[ci];
          const track = s.start >= tr[0] - 1e-5 ? 0 : 1;  // 10 µs: telescoped phases on an epoch clock
          if (track) split[ci] = true;
          tr[track] = Math.max(tr[track], s.start + s.dur);
          return track;
        });
        for (const [i, s] of sorted.entries()) {
          const ci = Math.max(0, CATS.indexOf(s.cat));
          const end = s.start + s.dur;
          if (end < v0 || s.start > v1) continue;
          const x0 = Math.max(GUTTER - 2, X(s.start));
          const x1 = Math.min(cssW, X(end));
          const w = Math.max(1, x1 - x0);
          const h = split[ci] ? L.sub / 2 : L.sub;
          const y = top + ci * L.sub + (split[ci] && tracks[i] ? L.sub / 2 : 0);
          ctx.fillStyle = colorOf(s.name);
          ctx.fillRect(x0, y, w, Math.max(1, h - (L.sub > 4 ? 1 : 0)));
          if (s.outlier) {  // a red frame, and a red cap above the span
            ctx.strokeStyle = '#d0021b';
            ctx.lineWidth = 1.5;
            ctx.strokeRect(x0 + 0.75, y + 0.75, Math.max(1, w - 1.5), Math.max(1, h - 2.5));
            ctx.fillStyle = '#d0021b';
            ctx.fillRect(x0, y, w, Math.min(3, h / 3));
          }
          if (view.selected && view.selected.span === s) {
            ctx.strokeStyle = '#000';
            ctx.lineWidth = 2;
            ctx.strokeRect(x0, y, w, h - 1);
          }
          if (w > 40 && h >= 10) {
            ctx.fillStyle = s.name === 'comm_wait' ? '#445' : '#fff';
            ctx.fillText(s.name, x0 + 3, y + h / 2, w - 6);
          }
          view.drawn.push({ x: x0, y, w, h, span: s, lane });
          count++;
        }
        ctx.restore();
      });
      canvas.dataset.spans = String(count);
      canvas.dataset.outliers = String(view.outliers);
    };

    // ---- details of a span
    function showDetails(hit) {
      view.selected = hit ? { span: hit.span, lane: hit.lane } : null;
      if (!hit) {
        details.hidden = true;
        return;
      }
      const s = hit.span;
      details.hidden = false;
      details.dataset.name = s.name;
      details.dataset.lane = String(hit.lane.id);
      details.dataset.step = s.step === undefined ? '' : String(s.step);
      details.dataset.dur = String(s.dur);
      const rows = [
        ['span', s.name + ' (' + s.cat + ')'],
        [o.laneNoun, String(hit.lane.label)],
      ];
      if (s.step !== undefined) rows.push(['step', String(s.step)]);
      rows.push(['start', s.stepStart !== undefined ? '+' + fmtS(s.start - s.stepStart) + ' into the step' : '+' + fmtS(s.start - view.v0) + ' into the view']);
      rows.push(['duration', fmtS(s.dur) + (s.outlier ? ' (' + s.outlier.toFixed(1) + '× the usual ' + s.name + ')' : '')]);
      for (const [k, v] of s.info || []) rows.push([k, v]);
      for (const [k, v] of Object.entries(s.args || {})) rows.push([k, typeof v === 'object' ? JSON.stringify(v) : String(v)]);
      const dl = el('dl');
      for (const [k, v] of rows) {
        const dt = el('dt', null, k);
        const dd = el('dd', null, v);
        dd.dataset.field = k;
        dl.append(dt, dd);
      }
      const close = el('button', 'tl-close', '×');
      close.type = 'button';
      close.title = 'close';
      close.addEventListener('click', () => { showDetails(null); view.draw(); });
      details.replaceChildren(close, dl);
    }

    function hitAt(x, y) {
      for (let i = view.drawn.length - 1; i >= 0; i--) {
        const d = view.drawn[i];
        if (x >= d.x - 1 && x <= d.x + d.w + 1 && y >= d.y && y <= d.y + d.h) return d;
      }
      return null;
    }

    // ---- zoom and pan
    function zoom(factor, atX) {
      const cssW = canvas.clientWidth || 800;
      const frac = Math.min(1, Math.max(0, ((atX === undefined ? (GUTTER + cssW) / 2 : atX) - GUTTER) / (cssW - GUTTER - 4)));
      const at = view.v0 + frac * (view.v1 - view.v0);
      const span = Math.max(1e-6, (view.v1 - view.v0) * factor);
      view.follow = false;
      view.v0 = at - frac * span;
      view.v1 = view.v0 + span;
      view.draw();
    }
    buttons.in.addEventListener('click', () => zoom(0.5));
    buttons.out.addEventListener('click', () => zoom(2));
    buttons.fit.addEventListener('click', () => { view.follow = true; view.draw(); });
    canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect();
      zoom(Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.002))), e.clientX - r.left);
    }, { passive: false });
    let drag = null;
    canvas.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, v0: view.v0, v1: view.v1, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (Math.abs(dx) < 3 && !drag.moved) return;
      drag.moved = true;
      const perPx = (drag.v1 - drag.v0) / Math.max(1, (canvas.clientWidth || 800) - GUTTER - 4);
      view.follow = false;
      view.v0 = drag.v0 - dx * perPx;
      view.v1 = drag.v1 - dx * perPx;
      view.draw();
    });
    window.addEventListener('mouseup', (e) => {
      if (!drag) return;
      const moved = drag.moved;
      drag = null;
      if (moved || e.target !== canvas) return;
      const r = canvas.getBoundingClientRect();
      showDetails(hitAt(e.clientX - r.left, e.clientY - r.top));
      view.draw();
    });
    if (select) select.addEventListener('change', () => { if (o.onSteps) o.onSteps(Number(select.value)); });
    view.canvas = canvas;
    view.details = details;
    view.select = (hit) => { showDetails(hit); view.draw(); };
    return view;
  }

  window.CohortTimeline = { create, colorOf, COLORS };
})();
