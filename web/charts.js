// cohort dashboard: the charts (Chart.js, embedded from Debian's libjs-chart.js) and what the
// step-time bars show. No DOM lookups and no page state: app.js hands in canvases and data.
'use strict';

window.CohortCharts = (function () {
  const { num, defined } = window.CohortFormat;

  // A per-step series (faint) and its trailing mean over smoothSteps steps (bold): steps are noisy.
  function lineChart(canvas, label, color, faint, zero, smoothSteps) {
    const series = (name, c, width) => ({ label: name, data: [], borderColor: c, backgroundColor: c, borderWidth: width, pointRadius: 0, tension: 0 });
    return new window.Chart(canvas, {
      type: 'line',
      data: { datasets: [series(label, faint, 1), series(label + ' (mean of ' + smoothSteps + ' steps)', color, 2)] },
      options: {
        animation: false,
        parsing: false,
        normalized: true,
        responsive: true,
        maintainAspectRatio: false,
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: {
          x: { type: 'linear', title: { display: true, text: 'step' }, ticks: { precision: 0 } },
          y: { beginAtZero: zero },
        },
        plugins: { legend: { display: false } },
      },
    });
  }

  // The trailing mean over n points (non-finite values left out).
  function smooth(points, n) {
    const out = [];
    let sum = 0;
    let count = 0;
    for (let i = 0; i < points.length; i++) {
      const y = points[i].y;
      if (Number.isFinite(y)) { sum += y; count++; }
      if (i >= n) {
        const old = points[i - n].y;
        if (Number.isFinite(old)) { sum -= old; count--; }
      }
      out.push({ x: points[i].x, y: count > 0 ? sum / count : NaN });
    }
    return out;
  }

  // Step time per rank as stacked bars, one colour per phase; isSlow(i): the i-th label in bold orange.
  function stepTimeChart(canvas, phases, isSlow) {
    return new window.Chart(canvas, {
      type: 'bar',
      data: { labels: [], datasets: phases.map((p) => ({ label: p.label, data: [], backgroundColor: p.color })) },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: {
          x: {
            stacked: true,
            ticks: {
              color: (ctx) => (isSlow(ctx.index) ? '#d98b00' : '#6b7385'),
              font: (ctx) => ({ weight: isSlow(ctx.index) ? 'bold' : 'normal' }),
            },
          },
          y: { stacked: true, beginAtZero: true, title: { display: true, text: 'ms per step' } },
        },
        plugins: {
          legend: { position: 'bottom', labels: { boxWidth: 12 } },
          tooltip: { callbacks: { label: (c) => c.dataset.label + ': ' + Number(c.raw).toFixed(2) + ' ms' } },
        },
      },
    });
  }

  // The job's loss and samples/s by step, and the loss chart's marks: a triangle at each loss spike
  // or NaN (on the loss of that step, else on the latest loss). history: [{step, loss,
  // samples_per_s}]; events: the event lines.
  function jobSeries(history, events) {
    const lossPoints = [];
    const ratePoints = [];
    for (const p of history) {
      if (defined(p.loss)) lossPoints.push({ x: p.step, y: Number.isFinite(p.loss) ? p.loss : NaN });
      if (defined(p.samples_per_s) && Number.isFinite(p.samples_per_s)) ratePoints.push({ x: p.step, y: p.samples_per_s });
    }
    const marks = [];
    for (const e of events) {
      if (e.kind !== 'anomaly' || !defined(e.step) || (e.anomaly !== 'loss_spike' && e.anomaly !== 'nan')) continue;
      const at = history.find((p) => p.step === e.step);
      const y = at && Number.isFinite(at.loss) ? at.loss : lossPoints.length ? lossPoints[lossPoints.length - 1].y : 0;
      marks.push({ x: e.step, y });
    }
    return { lossPoints, ratePoints, marks };
  }

  // Step time per rank: the mean of each phase over each rank's latest `window` steps (the means add
  // up to the step; what no phase covers is "other"). ranks: rank -> rank object; rankHistory:
  // rank -> [{step_s, phases}]. Returns the bars' labels, which ranks are slow, and per phase its
  // values in ms, rank by rank.
  function phaseMeans(ranks, rankHistory, phases, window) {
    const keys = [...new Set([...ranks.keys(), ...rankHistory.keys()])].sort((a, b) => a - b);
    const labels = [];
    const slow = [];
    const per = phases.map(() => []);
    for (const k of keys) {
      const r = ranks.get(k) || {};
      const recent = (rankHistory.get(k) || []).slice(-window);
      labels.push('rank ' + k + (r.state === 'slow' ? ' (slow)' : ''));
      slow.push(r.state === 'slow');
      const sums = {};
      for (const p of phases) sums[p.key] = 0;
      let n = 0;
      for (const rec of recent) {
        const step = num(rec.step_s);
        if (!defined(step) || !Number.isFinite(step)) continue;
        n++;
        let known = 0;
        for (const p of phases) {
          if (p.key === 'other') continue;
          const v = rec.phases ? num(rec.phases[p.key]) : undefined;
          if (defined(v) && Number.isFinite(v)) {
            sums[p.key] += v;
            known += v;
          }
        }
        sums.other += Math.max(0, step - known);
      }
      phases.forEach((p, i) => per[i].push(n ? (sums[p.key] / n) * 1000 : 0));
    }
    return { labels, slow, per };
  }

  return { lineChart, smooth, jobSeries, stepTimeChart, phaseMeans };
})();
