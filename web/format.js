// cohort dashboard: numbers and times as the page writes them. Pure functions, no DOM; app.js and
// charts.js use them (loaded before them by index.html).
'use strict';

window.CohortFormat = (function () {
  // Numbers may come as strings "nan", "inf", "-inf" (JSON has no NaN), or as null from a snapshot.
  function num(v) {
    if (typeof v === 'number') return v;
    if (typeof v === 'string') {
      const s = v.toLowerCase();
      if (s === 'nan') return NaN;
      if (s === 'inf' || s === '+inf' || s === 'infinity') return Infinity;
      if (s === '-inf' || s === '-infinity') return -Infinity;
      const n = Number(v);
      return Number.isNaN(n) ? undefined : n;
    }
    return undefined;
  }
  const defined = (v) => v !== undefined && v !== null;

  function fmtNumber(v, digits) {
    const n = num(v);
    if (!defined(n)) return '–';
    if (Number.isNaN(n)) return 'NaN';
    if (!Number.isFinite(n)) return n > 0 ? '+Inf' : '-Inf';
    const a = Math.abs(n);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return n.toExponential(2);
    return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  }
  function fmtMs(seconds) {
    const n = num(seconds);
    if (!defined(n) || !Number.isFinite(n)) return '–';
    return n >= 1 ? n.toFixed(2) + ' s' : (n * 1000).toFixed(n < 0.01 ? 2 : 1) + ' ms';
  }
  function fmtBytes(b) {
    const n = num(b);
    if (!defined(n) || !Number.isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let u = 0;
    let v = n;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return v.toFixed(u === 0 ? 0 : 1) + ' ' + units[u];
  }
  function fmtDuration(s) {
    if (!defined(s) || !Number.isFinite(s) || s < 0) return '–';
    s = Math.floor(s);
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    return h > 0 ? h + 'h ' + String(m).padStart(2, '0') + 'm' : m > 0 ? m + 'm ' + String(sec).padStart(2, '0') + 's' : sec + 's';
  }
  function fmtTime(t) {
    const n = num(t);
    if (!defined(n) || !Number.isFinite(n)) return '';
    return new Date(n * 1000).toLocaleTimeString('en-GB', { hour12: false });
  }
  function median(values) {
    const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
    if (v.length === 0) return undefined;
    const m = v.length >> 1;
    return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  }

  return { num, defined, fmtNumber, fmtMs, fmtBytes, fmtDuration, fmtTime, median };
})();
