// Frames per second of the simulator's page (web/sim/) in headless Chromium while a 1,000-worker
// job runs at each speed, over 5 s each (bench/sim/sim_speed.sh runs this; tests/e2e/lib.js's browser).
'use strict';
const path = require('path');
const t = require('../../tests/e2e/lib');

(async () => {
  const url = 'file://' + path.join(path.resolve(process.env.COHORT_SIM_PAGE), 'index.html');
  const browser = await t.launchBrowser();
  try {
    for (const [name, extra] of [['64-gpus', {}], ['1,000 workers', { nodes: 125, workers_per_node: 8 }], ['10,000 workers', { nodes: 1250, workers_per_node: 8 }]]) {
      const page = await t.openPage(browser, url + '?preset=llama3-4096');
      await page.evaluate((extra) => {
        const p = Object.assign(window.cohortSim.params, extra);
        window.cohortSim.start(p);
      }, name === '64-gpus' ? {} : extra);
      if (name === '64-gpus') await page.selectOption('#preset', '64-gpus');
      for (const speed of ['600', '3600']) {
        await page.selectOption('#speed', speed);
        await page.waitForTimeout(1500);
        const a = await page.evaluate(() => ({ f: window.cohortSim.stats.frames, t: performance.now(), s: window.cohortSim.report.t }));
        await page.waitForTimeout(5000);
        const b = await page.evaluate(() => ({ f: window.cohortSim.stats.frames, t: performance.now(), s: window.cohortSim.report.t, ms: window.cohortSim.stats.advanceMs, w: window.cohortSim.report.world, st: window.cohortSim.stats }));
        console.log(name + ' (' + b.w + ' workers), speed ' + speed + ' sim-s/s: ' + ((b.f - a.f) * 1000 / (b.t - a.t)).toFixed(1) +
          ' frames/s, ' + ((b.s - a.s) / ((b.t - a.t) / 1000)).toFixed(0) + ' simulated s per s; last slice ' + b.ms.toFixed(1) + ' ms, charts ' + b.st.chartMs.toFixed(1) + ' ms, timeline ' + b.st.timelineMs.toFixed(1) + ' ms, summary ' + b.st.summaryMs.toFixed(1) + ' ms');
      }
      await page.close();
    }
  } finally {
    await browser.close();
  }
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
