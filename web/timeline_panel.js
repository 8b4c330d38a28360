// The dashboard's timeline panel (issue 49, docs/monitoring.md "Timeline"): keeps the step
// timelines the ranks report (the "timeline" of each metrics record: spans relative to the step's
// start t0 on the job clock) and draws the last N steps of every rank with web/timeline.js. Fed by
// app.js: snapshot(s) with /api/state (its "timelines": the hub's last 20 steps per rank),
// metrics(m) with each streamed record, render(rankKeys) when the page redraws.
'use strict';

window.CohortTimelinePanel = (function () {
  const KEEP = 50;                    // steps kept per rank (the largest choice)
  const CHOICES = [1, 5, 10, 20, 50];
  const store = new Map();            // rank -> [{step, tl}] sorted by step
  let steps = 10;
  let dirty = true;
  let view = null;
  let lastRanks = '';

  function add(rank, step, tl) {
    if (!tl || typeof tl !== 'object' || !Array.isArray(tl.spans)) return;
    let list = store.get(rank);
    if (!list) store.set(rank, (list = []));
    // A step at or below the newest (a restart resumed from a checkpoint) replaces the tail.
    while (list.length && list[list.length - 1].step >= step) list.pop();
    list.push({ step, tl });
    if (list.length > KEEP) list.splice(0, list.length - KEEP);
    dirty = true;
  }

  function snapshot(s) {
    store.clear();
    const all = (s && s.timelines) || {};
    for (const key of Object.keys(all)) {
      for (const p of all[key] || []) if (p && Number.isFinite(Number(p.step))) add(Number(key), Number(p.step), p.timeline);
    }
    dirty = true;
  }

  function metrics(m) {
    if (m && m.timeline && Number.isFinite(Number(m.rank)) && Number.isFinite(Number(m.step))) add(Number(m.rank), Number(m.step), m.timeline);
  }

  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const ms = (v) => (v * 1000).toFixed(3) + ' ms';

  // The lanes of the last `steps` steps reported by any rank, on the job clock.
  function lanesOf(rankKeys) {
    const all = new Set();
    for (const list of store.values()) for (const p of list) all.add(p.step);
    const shown = new Set([...all].sort((a, b) => b - a).slice(0, steps));
    const starts = new Map();  // step -> earliest t0 of any rank
    const keys = [...new Set([...rankKeys, ...store.keys()])].sort((a, b) => a - b);
    const lanes = keys.map((rank) => {
      const spans = [];
      for (const p of store.get(rank) || []) {
        if (!shown.has(p.step)) continue;
        const t0 = num(p.tl.t0);
        if (t0 === undefined) continue;
        if (!starts.has(p.step) || t0 < starts.get(p.step)) starts.set(p.step, t0);
        const info = [];
        if (num(p.tl.clock_offset_s) !== undefined) {
          info.push(['clock', 'offset ' + ms(p.tl.clock_offset_s) + (num(p.tl.clock_error_s) !== undefined ? ' ± ' + ms(p.tl.clock_error_s) : '')]);
        }
        if (p.tl.truncated) info.push(['note', 'the step had more spans than recorded (truncated)']);
        for (const sp of p.tl.spans) {
          if (!Array.isArray(sp) || sp.length < 4) continue;
          const start = num(sp[2]), dur = num(sp[3]);
          if (start === undefined || dur === undefined) continue;
          spans.push({
            name: String(sp[0]), cat: String(sp[1]), start: t0 + start, dur: Math.max(0, dur), step: p.step,
            stepStart: t0, args: sp[4] && typeof sp[4] === 'object' ? sp[4] : null, info,
          });
        }
      }
      return { id: rank, label: 'rank ' + rank, spans };
    });
    const marks = [...starts.entries()].sort((a, b) => a[0] - b[0]).map(([step, t]) => ({ t, label: 'step ' + step }));
    return { lanes, marks };
  }

  function init(container) {
    view = window.CohortTimeline.create(container, {
      canvasId: 'timeline', steps: CHOICES, defaultSteps: steps, laneNoun: 'rank',
      empty: 'no step timelines yet: each rank sends its step\'s spans with its metrics',
      onSteps: (n) => { steps = n; dirty = true; render(null); },
    });
  }

  function render(rankKeys) {
    if (!view) return;
    const keys = rankKeys ? [...rankKeys] : JSON.parse(lastRanks || '[]');
    const id = JSON.stringify(keys);
    if (!dirty && id === lastRanks) return;
    dirty = false;
    lastRanks = id;
    view.setData(lanesOf(keys));
  }

  return { init, snapshot, metrics, render, store, get view() { return view; }, get steps() { return steps; } };
})();
