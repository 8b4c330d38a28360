// The timeline view (web/timeline.js) as the browser tests read it: what it drew (every span with
// its lane, its step and its place on the canvas), whether pixels were painted, and a click on a
// span through the real mouse, returning the details it shows. Used by the dashboard's tests
// (window.cohortDashboard.timeline) and the simulator's (window.cohortSim.timeline).
'use strict';

/// What the view drew: {lanes: [{id, label, spans}], drawn: [{lane, name, cat, step, dur, outlier,
/// x, y}], painted (canvas pixels not blank), outliers, legend: [names]}.
async function timelineInfo(page, expr) {
  return page.evaluate((expr) => {
    // eslint-disable-next-line no-new-func
    const view = new Function('return ' + expr)();
    if (!view) return null;
    const c = view.canvas;
    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let painted = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i] > 0) painted++;
    return {
      lanes: view.lanes.map((l) => ({ id: l.id, label: l.label, spans: l.spans.length })),
      drawn: view.drawn.map((d) => ({
        lane: d.lane.id, name: d.span.name, cat: d.span.cat, step: d.span.step, dur: d.span.dur, outlier: d.span.outlier || 0,
        args: d.span.args, x: d.x + d.w / 2, y: d.y + d.h / 2, w: d.w,
      })),
      painted,
      outliers: view.outliers,
      legend: [...c.closest('.tl').querySelectorAll('.tl-legend .tl-key[data-name]')].map((k) => k.dataset.name),
      width: c.clientWidth,
    };
  }, expr);
}

/// Clicks the drawn span `d` (from timelineInfo) with the mouse; returns the details box's fields.
async function clickSpan(page, d, canvasSelector = '#timeline') {
  const box = await page.locator(canvasSelector).boundingBox();
  await page.mouse.click(box.x + d.x, box.y + d.y);
  await page.waitForSelector('.tl-details:not([hidden])', { timeout: 5000 });
  return page.evaluate(() => {
    const el = document.querySelector('.tl-details');
    const fields = {};
    for (const dd of el.querySelectorAll('dd')) fields[dd.dataset.field] = dd.textContent;
    return { name: el.dataset.name, lane: el.dataset.lane, step: el.dataset.step, fields, text: el.textContent };
  });
}

module.exports = { timelineInfo, clickSpan };
