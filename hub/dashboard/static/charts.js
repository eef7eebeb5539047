// Fleet dashboard charts: loaded with uPlot (uplot.min.js, loaded first)
// only once a chart is in view; app.js calls fleetChartKit.draw with the
// answer of a history route (hub/history) and nothing else. Colours come
// from app.css's custom properties, so the charts follow the theme.
'use strict';
(() => {
  const uPlot = window.uPlot;
  const cssVar = (name, fallback) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  const stepped = uPlot.paths.stepped({ align: 1 });
  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400];
  const countFmt = (u, v) => (v == null ? '—' : String(Math.round(v)));

  function baseOpts(width, height, series, axes, extra) {
    const text = cssVar('--text', '#1b1f24');
    const line = cssVar('--line', '#d8dde3');
    const axis = (o) => ({ stroke: text, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 }, ...o });
    return {
      width, height,
      series: [{ label: 'Time' }, ...series],
      // Whole seconds and up: samples are never closer than a second.
      axes: [axis({ incrs: TIME_INCRS, space: 60 }), ...axes.map(axis)],
      cursor: { drag: { x: false, y: false } },
      // Our own legend (below), not uPlot's table: a page's tables are
      // its data (and stack as cards on a phone).
      legend: { show: false },
      ...extra,
    };
  }
  const few = (n) => n < 60; // show the points of a short series

  // online: devices online and offline per interval of the last day.
  function online(d, width, height) {
    const ok = cssVar('--ok', '#17803d');
    const bad = cssVar('--bad', '#b3261e');
    const pts = { show: few(d.time.length) };
    // A sample covers its interval: the last one's counts hold until now
    // (at most to its interval's end), so even one sample is a line.
    const data = [d.time, d.online, d.offline, d.maxOffline].map((c) => c.slice());
    const n = d.time.length;
    const end = Math.min(Date.now() / 1000, d.time[n - 1] + d.intervalSeconds);
    if (n && end > d.time[n - 1] + 0.5) data.forEach((c, i) => c.push(i === 0 ? end : c[n - 1]));
    const opts = baseOpts(width, height, [
      { label: 'Online', stroke: ok, width: 2, paths: stepped, points: pts, value: countFmt },
      { label: 'Offline', stroke: bad, width: 2, paths: stepped, points: pts, value: countFmt },
      { label: 'Most offline in the interval', stroke: bad, width: 1, dash: [4, 4], paths: stepped, points: { show: false }, value: countFmt },
    ], [{ label: 'Devices', values: (u, ticks) => ticks.map((v) => (Number.isInteger(v) ? v : '')) }],
    { scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } } });
    return { opts, data };
  }

  // rollout: updated, ready, failed and pending devices at each change,
  // with a line where each wave (step) and each revision starts. The
  // last counts hold until now: one more point at the hub's answer time.
  function rollout(d, width, height) {
    const n = d.time.length;
    const cols = [d.time, d.updated, d.ready, d.failed, d.pending].map((c) => c.slice());
    const now = Date.now() / 1000;
    if (n && now > d.time[n - 1]) cols.forEach((c, i) => c.push(i === 0 ? now : c[n - 1]));
    const pts = { show: few(n) };
    const accent = cssVar('--accent', '#0b5fad');
    const text = cssVar('--text', '#1b1f24');
    const marks = [];
    for (let i = 0; i < n; i++) {
      if (i === 0 || d.step[i] !== d.step[i - 1] || d.revision[i] !== d.revision[i - 1]) {
        marks.push({ t: d.time[i], text: (d.steps[i] > 1 ? 'wave ' + d.step[i] + '/' + d.steps[i] : 'rev ' + d.revision[i]) + (i && d.revision[i] !== d.revision[i - 1] ? ' (rev ' + d.revision[i] + ')' : '') });
      }
    }
    const drawMarks = (u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = text; ctx.fillStyle = text; ctx.globalAlpha = 0.6;
      ctx.setLineDash([3, 3]); ctx.lineWidth = 1;
      ctx.font = Math.round(11 * devicePixelRatio) + 'px system-ui, sans-serif';
      for (const m of marks) {
        const x = Math.round(u.valToPos(m.t, 'x', true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        ctx.fillText(m.text, x + 3 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
      }
      ctx.restore();
    };
    const opts = baseOpts(width, height, [
      { label: 'Updated', stroke: accent, width: 2, paths: stepped, points: pts, value: countFmt },
      { label: 'Ready', stroke: cssVar('--ok', '#17803d'), width: 2, paths: stepped, points: pts, value: countFmt },
      { label: 'Failed', stroke: cssVar('--bad', '#b3261e'), width: 2, paths: stepped, points: pts, value: countFmt },
      { label: 'Pending', stroke: cssVar('--muted', '#5b6572'), width: 1, dash: [4, 4], paths: stepped, points: { show: false }, value: countFmt },
    ], [{ label: 'Devices', values: (u, ticks) => ticks.map((v) => (Number.isInteger(v) ? v : '')) }],
    { scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } }, hooks: { draw: [drawMarks] } });
    return { opts, data: cols };
  }

  // device: memory and disk used, in % of the latest totals (left axis),
  // and the temperature (right axis), where the device reported them.
  function device(d, width, height) {
    const pct = (col, total) => col.map((v) => (v == null || !total ? null : Math.round((v / total) * 1000) / 10));
    const data = [d.time, pct(d.memoryUsedBytes, d.memoryTotalBytes), pct(d.diskUsedBytes, d.diskTotalBytes), d.temperatureCelsius.slice()];
    const pts = { show: few(d.time.length) };
    const pctFmt = (u, v) => (v == null ? '—' : v.toFixed(1) + ' %');
    const opts = baseOpts(width, height, [
      { label: 'Memory used', stroke: cssVar('--accent', '#0b5fad'), width: 2, spanGaps: true, points: pts, value: pctFmt, scale: '%' },
      { label: 'Disk used', stroke: cssVar('--warn', '#8a5a00'), width: 2, spanGaps: true, points: pts, value: pctFmt, scale: '%' },
      { label: 'Temperature', stroke: cssVar('--bad', '#b3261e'), width: 2, spanGaps: true, points: pts, value: (u, v) => (v == null ? '—' : v.toFixed(1) + ' °C'), scale: '°C' },
    ], [
      { scale: '%', label: '% used', values: (u, ticks) => ticks.map((v) => v + ' %') },
      // No temperature reported (no thermal zone, or no fleet top yet):
      // no empty right-hand axis either.
      { scale: '°C', label: '°C', side: 1, grid: { show: false }, show: d.temperatureCelsius.some((v) => v != null) },
    ], { scales: { x: { time: true }, '%': { range: [0, 100] }, '°C': { range: (u, min, max) => (min == null ? [0, 100] : [Math.floor(min - 5), Math.ceil(max + 5)]) } } });
    return { opts, data };
  }

  const kinds = { online, rollout, device };

  // draw makes (or, for the same kind, updates) the chart of data in el.
  function draw(el, kind, data, old) {
    const width = Math.max(el.clientWidth, 240);
    const height = width < 500 ? 180 : 220;
    const { opts, data: cols } = kinds[kind](data, width, height);
    if (old) old.destroy();
    const plot = new uPlot(opts, cols, el);
    plot.root.append(legend(opts.series.slice(1)));
    return plot;
  }

  // legend lists the series with their colour and dash.
  function legend(series) {
    const ul = document.createElement('ul');
    ul.className = 'chart-legend';
    for (const s of series) {
      const li = document.createElement('li');
      const sw = document.createElement('span');
      sw.className = 'swatch' + (s.dash ? ' dashed' : '');
      sw.style.borderColor = s.stroke;
      sw.setAttribute('aria-hidden', 'true');
      li.append(sw, document.createTextNode(s.label));
      ul.append(li);
    }
    return ul;
  }

  window.fleetChartKit = { draw, version: '1.6.32' };
})();
