// Fleet dashboard: plain JavaScript, no framework, no external resource.
//
// Every piece of data reaches the page as text (textContent, attribute
// values set with setAttribute): nothing from the hub is ever parsed as
// HTML. The token lives in sessionStorage and travels only in the
// Authorization header, never in a URL. Routes live in the location hash:
// #/ (overview), #/devices?…, #/devices/NAME, #/deployments/NAME.
'use strict';
(() => {
  const TOKEN_KEY = 'fleet.dashboard.token';
  const PAGE_SIZE = 50;
  const main = document.getElementById('main');
  const top = document.getElementById('top');
  const conn = document.getElementById('conn');
  const who = document.getElementById('who');
  const announcer = document.getElementById('announce');

  // Measurements the browser test reads (performance.now() values).
  const perf = window.fleetPerf = { devicesFirstRender: null, filters: [] };

  const app = { token: null, session: null, view: null, stream: null, counts: null };

  // ---- DOM helpers --------------------------------------------------------------

  // h builds an element. attrs: class, text, html is NOT supported on
  // purpose; on* are listeners; booleans set properties.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, kids);
    return el;
  }
  function append(el, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const enc = encodeURIComponent;
  const deviceHref = (name) => '#/devices/' + enc(name);
  const deploymentHref = (name) => '#/deployments/' + enc(name);
  function announce(msg) { announcer.textContent = ''; setTimeout(() => { announcer.textContent = msg; }, 30); }
  // Intl formatters are costly to make: one each, reused.
  const numberFormat = new Intl.NumberFormat('en-US');
  const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  function fmtInt(n) { return numberFormat.format(Number(n || 0)); }
  function fmtBytes(n) {
    if (!n) return '—';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }
  function fmtDuration(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }
  // ago renders a time as "12 s ago" with the exact time in a tooltip.
  function ago(t) {
    if (!t) return h('span', { class: 'muted', text: 'never' });
    const d = new Date(t);
    if (isNaN(d)) return String(t);
    const s = (Date.now() - d.getTime()) / 1000;
    const local = dateFormat.format(d);
    const text = s < -5 ? local : fmtDuration(s) + ' ago';
    return h('time', { datetime: d.toISOString(), title: local, text });
  }
  function badge(text, kind) { return h('span', { class: 'badge ' + (kind || ''), text }); }
  const STATE = {
    online: ['Online', 'ok'], offline: ['Offline', 'bad'], stale: ['Stale', 'warn'], unknown: ['Never seen', ''],
  };
  function stateBadge(state) { const [t, k] = STATE[state] || [state, '']; return badge(t, k); }
  // convergedBadge says whether a device runs what it should; a device
  // never seen has not said, which is no warning: a neutral dash.
  function convergedBadge(state, converged, yes, no) {
    if (state === 'unknown') {
      return h('span', { class: 'muted', title: 'Never seen: the device has not reported yet' },
        h('span', { 'aria-hidden': 'true', text: '—' }), h('span', { class: 'sr-only', text: 'never seen' }));
    }
    return converged ? badge(yes, 'ok') : badge(no, 'warn');
  }
  function deviceState(st) {
    if (!st || !st.lastSeen) return 'unknown';
    if (st.online && st.stale) return 'stale';
    return st.online ? 'online' : 'offline';
  }
  function phaseBadge(phase, ready) {
    const kind = { Running: ready ? 'ok' : 'warn', Succeeded: 'ok', Pending: 'warn', Failed: 'bad' }[phase] || '';
    return badge(phase || 'Unknown', kind);
  }
  // podPhase is a pod's phase as fleet get pods says it: Unknown while
  // its device is not online (or stale), the phase it last reported
  // kept in the title and in lastReport's note.
  function podPhase(state, p) {
    if (state !== 'online') return h('span', { title: 'Last reported ' + (p.phase || 'Unknown') }, badge('Unknown', 'warn'));
    return phaseBadge(p.phase, p.ready);
  }
  // lastReport says, for a pod of a device that is not online, how old
  // the report its state comes from is: "device offline; last report 42s
  // ago: Running, ready".
  function lastReport(state, lastSeen, p) {
    if (state === 'online') return null;
    const why = state === 'stale' ? 'device silent' : 'device offline';
    return h('div', { class: 'last-report', 'data-last-report': '' }, why + '; last report ', ago(lastSeen),
      ': ' + (p.phase || 'Unknown') + ', ' + (p.ready ? 'ready' : 'not ready'));
  }
  // failedRevision says the device went back from a desired revision that
  // failed to start: what it runs is the revision shown, this one failed.
  function failedRevision(fr) {
    if (!fr) return null;
    return h('div', { class: 'failed-revision', 'data-failed-revision': fr.hash },
      badge('Revision ' + (fr.hash || '').slice(0, 8) + ' failed', 'bad'),
      ' ' + [fr.reason, fr.container && ('container ' + fr.container + (fr.image ? ' (' + fr.image + ')' : ''))].filter(Boolean).join(', ') +
      ': the device went back to the previous version');
  }
  function chips(labels, onPick) {
    const keys = Object.keys(labels || {}).sort();
    if (!keys.length) return h('span', { class: 'muted', text: '—' });
    return h('span', { class: 'chips' }, keys.map((k) => {
      const text = k + '=' + labels[k];
      return onPick
        ? h('button', { type: 'button', class: 'chip', text, title: 'Filter by ' + text, 'aria-label': 'Filter by label ' + text, onclick: () => onPick(k, labels[k]) })
        : h('span', { class: 'chip', text });
    }));
  }
  // table builds a table in its wrapper. On a phone (app.css) its rows
  // stack: each row a card, each cell a line of words headed by its
  // column's name (data-label), so no column is cut off. cls is the
  // table's class: 'stack' by default, 'events' for a list of events.
  function table(caption, head, rows, empty, cls) {
    const ths = head.map((c) => (c instanceof Node ? c : h('th', { scope: 'col', text: c })));
    const t = h('table', { class: cls || 'stack' },
      h('caption', { class: 'sr-only', text: caption }),
      h('thead', {}, h('tr', {}, ths)),
      h('tbody', {}, rows));
    label(t, ths.map((th) => th.textContent.trim()));
    const wrap = h('div', { class: 'table-wrap' }, t);
    if (!rows.length) wrap.append(h('p', { class: 'empty', text: empty || 'Nothing to show.' }));
    return wrap;
  }
  // label names each body cell after its column (data-label, which the
  // phone layout shows) and spells out the table's roles: a table whose
  // rows are laid out as blocks keeps its semantics for a screen reader
  // in every browser.
  function label(t, labels) {
    t.setAttribute('role', 'table');
    for (const row of t.rows) {
      row.setAttribute('role', 'row');
      for (const c of row.cells) {
        if (c.tagName === 'TH') c.setAttribute('role', 'columnheader');
        else {
          c.setAttribute('role', 'cell');
          if (labels[c.cellIndex] && !c.hasAttribute('data-label')) c.dataset.label = labels[c.cellIndex];
        }
      }
    }
    for (const g of [t.tHead, ...t.tBodies]) if (g) g.setAttribute('role', 'rowgroup');
  }
  function facts(pairs) {
    return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)]));
  }
  // bar draws a deployment's progress: ready, updated (not ready yet) and
  // failed devices, out of those targeted. Widths go through the CSSOM,
  // which the page's Content-Security-Policy allows (style attributes in
  // markup it does not).
  function bar(s) {
    const total = Math.max(1, s.targeted || 0);
    const ready = Math.min(s.ready || 0, s.updated || 0);
    const seg = (cls, n) => { const e = h('span', { class: cls }); e.style.width = (100 * n / total) + '%'; return e; };
    return h('div', {
      class: 'bar', role: 'img',
      'aria-label': `${s.updated || 0} of ${s.targeted || 0} updated, ${s.ready || 0} ready, ${s.failed || 0} failed`,
    }, seg('ready', ready), seg('updated', Math.max(0, (s.updated || 0) - ready - (s.failed || 0))), seg('failed', s.failed || 0));
  }

  // ---- the API --------------------------------------------------------------------

  class HTTPError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  class NetError extends Error {}

  async function api(path, opts = {}) {
    const headers = { Authorization: 'Bearer ' + app.token, Accept: 'application/json' };
    let body;
    if (opts.body !== undefined) { headers['Content-Type'] = 'application/json'; body = JSON.stringify(opts.body); }
    let res;
    try {
      res = await fetch(path, { method: opts.method || 'GET', headers, body, signal: opts.signal, cache: 'no-store' });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new NetError('cannot reach the hub');
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (res.status === 401) {
      sessionEnded(data && data.message);
      throw new HTTPError(401, 'signed out');
    }
    if (!res.ok) throw new HTTPError(res.status, (data && data.message) || text || ('HTTP ' + res.status));
    return data;
  }

  // ---- sign-in ------------------------------------------------------------------

  function showLogin(message) {
    stopStream();
    setConn('idle', 'Connecting…');
    if (app.view && app.view.destroy) app.view.destroy();
    app.view = null;
    app.token = null;
    app.session = null;
    sessionStorage.removeItem(TOKEN_KEY);
    top.hidden = true;
    document.title = 'Sign in · Fleet';
    const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'login-help login-error' });
    const error = h('p', { id: 'login-error', class: 'error', role: 'alert', text: message || '' });
    const submit = h('button', { type: 'submit', class: 'primary', text: 'Sign in' });
    const form = h('form', { 'aria-labelledby': 'login-title' },
      h('div', {}, h('label', { for: 'token', text: 'Access token' }), input),
      error, submit);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const token = input.value.trim();
      if (!token) { error.textContent = 'Enter a token.'; input.focus(); return; }
      submit.disabled = true;
      error.textContent = '';
      try {
        const res = await fetch('/v1/dashboard/session', { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
        if (res.status === 401) {
          error.textContent = 'The hub refused this token: it is not a valid admin or monitor token. Check it and try again.';
          input.select();
          return;
        }
        if (!res.ok) { error.textContent = 'The hub answered ' + res.status + '. Try again.'; return; }
        app.token = token;
        sessionStorage.setItem(TOKEN_KEY, token);
        start(await res.json());
      } catch (e) {
        error.textContent = 'Cannot reach the hub. Check that it runs and try again.';
      } finally {
        submit.disabled = false;
      }
    });
    main.replaceChildren(h('section', { class: 'login panel' },
      h('h1', { id: 'login-title', text: 'Fleet dashboard' }),
      h('p', { id: 'login-help', class: 'muted' },
        'Sign in with a token of this hub. A read-only token comes from ', h('code', { text: 'fleet monitor add NAME' }),
        '; the admin token is in the hub\'s ', h('code', { text: 'admin.conf' }), '.'),
      form));
    input.focus();
  }

  // sessionEnded returns to the sign-in page saying why.
  function sessionEnded(reason) {
    if (!app.token) return;
    showLogin('Your session ended: the hub no longer accepts this token' +
      (reason ? ' (' + reason + ')' : '') + '. It was revoked or replaced. Sign in again.');
  }

  function start(session) {
    app.session = session;
    top.hidden = false;
    who.textContent = session.name + ' · ' + session.role + (session.readOnly ? ' (read-only)' : '');
    startStream();
    route();
  }

  document.getElementById('signout').addEventListener('click', () => showLogin(''));
  document.getElementById('skip').addEventListener('click', (ev) => { ev.preventDefault(); main.focus(); });

  // ---- the live stream ----------------------------------------------------------

  function setConn(state, text) {
    conn.dataset.state = state;
    conn.textContent = text;
  }

  function stopStream() {
    const s = app.stream;
    app.stream = null;
    if (!s) return;
    clearTimeout(s.timer);
    s.ctrl.abort();
  }

  function startStream(retry = 0) {
    stopStream();
    const s = { ctrl: new AbortController(), timer: null, retry };
    app.stream = s;
    run(s).then((again) => {
      if (app.stream !== s || !again) return;
      setConn('reconnecting', 'Reconnecting…');
      if (app.view && app.view.offline) app.view.offline();
      const delay = Math.min(3000, 250 * 2 ** s.retry) * (0.6 + Math.random() * 0.4);
      s.timer = setTimeout(() => { if (app.stream === s) startStream(s.retry + 1); }, delay);
    });
  }

  // run reads one stream until it ends; it resolves true when the page
  // should reconnect.
  async function run(s) {
    let res;
    try {
      res = await fetch('/v1/dashboard/stream', {
        headers: { Authorization: 'Bearer ' + app.token, Accept: 'text/event-stream' }, signal: s.ctrl.signal, cache: 'no-store',
      });
    } catch (e) {
      return !s.ctrl.signal.aborted;
    }
    if (res.status === 401) { sessionEnded(); return false; }
    if (!res.ok || !res.body) return true;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return true;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let name = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) name = line.slice(6).trim();
            else if (line.startsWith('data:')) data += line.slice(5).trim();
          }
          if (!data) continue; // a comment (heartbeat)
          let msg = null;
          try { msg = JSON.parse(data); } catch (e) { continue; }
          if (onEvent(s, name, msg) === false) return false;
        }
      }
    } catch (e) {
      return !s.ctrl.signal.aborted;
    }
  }

  function onEvent(s, name, msg) {
    switch (name) {
      case 'hello': {
        const was = conn.dataset.state;
        s.retry = 0;
        setConn('live', 'Live');
        app.counts = msg.counts;
        if (was === 'reconnecting') announce('Reconnected to the hub.');
        // Level-triggered: whatever happened while away, reload the view.
        if (app.view && app.view.refresh && was !== 'idle') app.view.refresh();
        return true;
      }
      case 'change':
        app.counts = msg.counts;
        if (app.view && app.view.onChange) app.view.onChange(msg);
        return true;
      case 'unauthorized':
        sessionEnded(msg.message);
        return false;
      case 'shutdown':
        setConn('reconnecting', 'Reconnecting…');
        return true;
      default:
        return true;
    }
  }

  // ---- routing ------------------------------------------------------------------

  function parseHash() {
    const hash = location.hash || '#/';
    const [path, query] = hash.slice(1).split('?');
    return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || '') };
  }

  function route() {
    if (!app.token) return;
    if (location.hash && !location.hash.startsWith('#/')) return; // an in-page anchor
    if (app.view && app.view.destroy) app.view.destroy();
    let r;
    try { r = parseHash(); } catch (e) { r = { parts: ['?'], params: new URLSearchParams() }; }
    const [a, b] = r.parts;
    let view;
    if (!a) view = overviewView();
    else if (a === 'devices' && b === undefined) view = devicesView(r.params);
    else if (a === 'devices') view = deviceView(b);
    else if (a === 'deployments' && b !== undefined) view = deploymentView(b);
    else view = notFoundView();
    app.view = view;
    for (const link of top.querySelectorAll('[data-nav]')) {
      const current = link.dataset.nav === (a === 'devices' ? 'devices' : !a ? 'overview' : '');
      if (current) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
    }
    view.mount();
  }
  // After a navigation the new page's heading takes the focus (once it is
  // there), as a screen reader user expects.
  window.addEventListener('hashchange', () => {
    app.focusHeading = true;
    route();
    focusHeading();
  });
  function focusHeading() {
    const h1 = app.focusHeading && main.querySelector('h1');
    if (!h1) return;
    app.focusHeading = false;
    h1.tabIndex = -1;
    h1.focus({ preventScroll: true });
  }

  // live makes a view that loads its data and renders it, at most one
  // load at a time: a change that arrives during a load runs one more.
  function live(title, load, render) {
    let loading = false; let again = false; let dead = false; let data = null;
    const notice = h('p', { class: 'notice', role: 'status' });
    // The outcome of the last action: kept across reloads of the data.
    const note = h('p', { class: 'notice', id: 'action-note', role: 'status' });
    const body = h('div', {});
    const v = {
      mount() {
        document.title = title + ' · Fleet';
        main.replaceChildren(notice, note, body);
        v.refresh();
      },
      async refresh() {
        if (loading) { again = true; return; }
        loading = true;
        try {
          do {
            again = false;
            try {
              data = await load();
              if (dead) return;
              notice.textContent = '';
              notice.className = 'notice';
              const focus = pathOf(document.activeElement, body);
              body.replaceChildren(render(data));
              refocus(body, focus);
              focusHeading();
            } catch (e) {
              if (dead || (e instanceof HTTPError && e.status === 401)) return;
              showError(e);
            }
          } while (again && !dead);
        } finally {
          loading = false;
        }
      },
      offline() {
        notice.className = 'notice warn';
        notice.textContent = 'The connection to the hub was lost: reconnecting. What is shown may be out of date.';
      },
      destroy() { dead = true; },
      note: (text, kind) => { note.className = 'notice ' + (kind || ''); note.textContent = text; },
    };
    function showError(e) {
      if (e instanceof NetError) return v.offline();
      if (e instanceof HTTPError && e.status === 404) {
        body.replaceChildren(h('h1', { text: 'Not found' }), h('p', { text: e.message }), h('p', {}, h('a', { href: '#/', text: 'Back to the overview' })));
        return;
      }
      notice.className = 'notice error';
      notice.textContent = 'Could not load this page: ' + e.message;
    }
    return v;
  }

  // A live view is rebuilt on every change: the element that had the
  // focus (a button, a link) gets it back at the same place, so a
  // keyboard user is not thrown back to the top of the page.
  function pathOf(el, root) {
    const path = [];
    while (el && el !== root) {
      const parent = el.parentElement;
      if (!parent) return null;
      path.unshift([el.tagName, Array.prototype.indexOf.call(parent.children, el)]);
      el = parent;
    }
    return el === root && path.length ? path : null;
  }
  function refocus(root, path) {
    if (!path) return;
    let el = root;
    for (const [tag, i] of path) {
      el = el.children[i];
      if (!el || el.tagName !== tag) return;
    }
    el.focus({ preventScroll: true });
  }

  function notFoundView() {
    return { mount() { main.replaceChildren(h('h1', { text: 'Not found' }), h('p', {}, 'No such page. ', h('a', { href: '#/', text: 'Back to the overview' }))); } };
  }

  // ---- charts -------------------------------------------------------------------

  // A chart draws what a history route answers (hub/history), never what
  // the page saw itself. Its code (charts.js) and library (uPlot, about
  // 23 KB gzipped) load only once a chart is in view: the sign-in page,
  // the devices list and the first paint of every view never wait for
  // them. window.fleetCharts holds, per chart, the route it drew from,
  // that route's answer and the uPlot instance (the browser test reads
  // them).
  const charts = window.fleetCharts = {};
  let kitLoading = null;
  function loadScript(src) {
    return new Promise((resolve, reject) => {
      document.head.append(h('script', { src, onload: resolve, onerror: () => reject(new Error('cannot load ' + src)) }));
    });
  }
  function loadChartKit() {
    if (!kitLoading) {
      document.head.append(h('link', { rel: 'stylesheet', href: '/ui/uplot.min.css' }));
      kitLoading = loadScript('/ui/uplot.min.js').then(() => loadScript('/ui/charts.js')).then(() => window.fleetChartKit);
      kitLoading.catch(() => { kitLoading = null; });
    }
    return kitLoading;
  }

  // chartBox is one chart of a view: made once per view and put back in
  // each render, so its canvas survives live updates. update(url, data)
  // gives it a history route's answer; summarize says in a sentence what
  // it shows (the text alternative, also shown under the chart). While
  // it is on the page and in view it asks its route again every
  // CHART_POLL ms, since the hub samples on its own clock (every few
  // seconds), not on the changes that make a view reload.
  const CHART_POLL = 5000;
  function chartBox(key, kind, title, summarize) {
    const plotEl = h('div', { class: 'chart-plot', role: 'img', 'aria-label': title });
    const summary = h('p', { class: 'chart-summary muted' });
    const el = h('figure', { class: 'chart panel', 'data-chart': key }, h('figcaption', { text: title }), plotEl, summary);
    const st = charts[key] = { kind, url: null, data: null, plot: null, error: null, redraw: () => { drawn = null; draw(); } };
    let visible = false;
    let drawn = null;
    function draw() {
      if (!visible || !st.data || drawn === st.data) return;
      const data = st.data;
      // Nothing to draw: the summary under it says so.
      plotEl.hidden = !data.time.length;
      if (!data.time.length) {
        if (st.plot) { st.plot.destroy(); st.plot = null; }
        plotEl.replaceChildren();
        drawn = data;
        return;
      }
      loadChartKit().then((kit) => {
        if (st.data !== data) return; // a newer answer draws itself
        if (!st.plot) plotEl.replaceChildren();
        st.plot = kit.draw(plotEl, kind, data, st.plot);
        drawn = data;
      }, (e) => { st.error = e.message; plotEl.replaceChildren(h('p', { class: 'notice error', text: 'Chart unavailable: ' + e.message })); });
    }
    const seen = new IntersectionObserver((entries) => {
      for (const e of entries) visible = e.isIntersecting;
      draw();
    });
    seen.observe(el);
    let shown = false;
    const timer = setInterval(async () => {
      if (el.isConnected) shown = true;
      else if (shown) { dispose(); return; } // the view is gone
      if (!st.url || !visible || !el.isConnected) return;
      try { update(st.url, await api(st.url)); } catch (e) { /* the view shows connection trouble */ }
    }, CHART_POLL);
    function update(url, data) {
      if (charts[key] !== st) { dispose(); return; } // another view's chart took the key
      st.url = url; st.data = data;
      const text = summarize(data);
      summary.textContent = text;
      plotEl.setAttribute('aria-label', title + ': ' + text);
      draw();
    }
    let width = 0;
    const sized = new ResizeObserver(() => {
      if (st.plot && Math.abs(plotEl.clientWidth - width) > 8) { width = plotEl.clientWidth; drawn = null; draw(); }
    });
    sized.observe(plotEl);
    function dispose() {
      clearInterval(timer); seen.disconnect(); sized.disconnect();
      if (st.plot && charts[key] !== st) { st.plot.destroy(); st.plot = null; }
    }
    return { el, update };
  }
  // The charts take their colours from the theme when drawn: draw them
  // again when the system switches between light and dark.
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
    for (const st of Object.values(charts)) if (st.plot) st.redraw();
  });
  const historyURL = {
    online: () => '/v1/dashboard/history/online',
    device: (name) => '/v1/dashboard/history/devices/' + enc(name),
    deployment: (name) => '/v1/dashboard/history/deployments/' + enc(name),
  };
  function windowText(d) { return d.windowSeconds % 3600 ? fmtDuration(d.windowSeconds) : (d.windowSeconds / 3600) + ' h'; }
  function onlineSummary(d) {
    const n = d.time.length;
    if (!n) return 'No sample yet: the hub samples the fleet every few seconds.';
    return `Now ${fmtInt(d.online[n - 1])} online, ${fmtInt(d.offline[n - 1])} offline; at most ${fmtInt(Math.max(...d.maxOffline))} offline ` +
      `in the last ${fmtDuration(Math.min(Date.now() / 1000, d.time[n - 1] + d.intervalSeconds) - d.time[0])} (one sample per ${fmtDuration(d.intervalSeconds)}).`;
  }
  function rolloutSummary(d) {
    const n = d.time.length;
    if (!n) return 'No change recorded since the hub started.';
    const i = n - 1;
    return `${fmtInt(n)} change${n > 1 ? 's' : ''} since ${dateFormat.format(new Date(d.time[0] * 1000))}; now revision ${d.revision[i]}` +
      (d.steps[i] > 1 ? `, wave ${d.step[i]} of ${d.steps[i]}` : '') + (d.phase[i] ? ` (${d.phase[i]})` : '') +
      `: ${fmtInt(d.updated[i])} updated, ${fmtInt(d.ready[i])} ready, ${fmtInt(d.failed[i])} failed, ${fmtInt(d.pending[i])} pending.`;
  }
  function deviceSummary(d) {
    const lastOf = (col) => { for (let i = col.length - 1; i >= 0; i--) if (col[i] != null) return col[i]; return null; };
    if (!d.time.length) return 'No report yet in the last ' + windowText(d) + '.';
    const mem = lastOf(d.memoryUsedBytes); const disk = lastOf(d.diskUsedBytes); const temp = lastOf(d.temperatureCelsius);
    return [
      mem == null ? 'memory not reported' : `memory ${fmtBytes(mem)} used of ${fmtBytes(d.memoryTotalBytes)}`,
      disk == null ? 'disk not reported' : `disk ${fmtBytes(disk)} used of ${fmtBytes(d.diskTotalBytes)}`,
      temp == null ? 'temperature not reported (it comes with fleet top)' : `temperature ${temp.toFixed(1)} °C`,
    ].join('; ').replace(/^./, (c) => c.toUpperCase()) + ` (${fmtInt(d.time.length)} samples).`;
  }

  // ---- overview -----------------------------------------------------------------

  function overviewView() {
    const chart = chartBox('online', 'online', 'Devices online and offline', onlineSummary);
    const v = live('Overview', async () => {
      const [summary, deps, events, hist] = await Promise.all([
        api('/v1/dashboard/summary'), api('/v1/deployments'), api('/v1/events?limit=25'), api(historyURL.online()),
      ]);
      return { summary, deps: deps.items || [], events: (events.items || []).slice().reverse(), hist };
    }, (d) => {
      chart.update(historyURL.online(), d.hist);
      return renderOverview(d, chart);
    });
    v.onChange = () => v.refresh();
    return v;
  }

  function renderOverview({ summary, deps, events }, chart) {
    const c = summary.counts;
    const card = (n, label, kind, href) => {
      const inner = [h('div', { class: 'n', text: fmtInt(n) }), h('div', { class: 'l', text: label })];
      return h('div', { class: 'card ' + (kind || ''), 'data-count': label.toLowerCase().replace(/\s+/g, '-') }, href ? h('a', { href, 'aria-label': fmtInt(n) + ' ' + label }, inner) : inner);
    };
    return h('div', {},
      h('h1', { text: 'Fleet overview' }),
      h('section', { 'aria-label': 'Devices' },
        h('div', { class: 'cards' },
          card(c.devices, 'Devices', '', '#/devices'),
          card(c.online, 'Online', c.online ? 'ok' : '', '#/devices?state=online'),
          card(c.offline, 'Offline', c.offline ? 'bad' : '', '#/devices?state=offline'),
          card(c.stale, 'Stale', c.stale ? 'warn' : '', '#/devices?state=stale'),
          card(c.unknown, 'Never seen', '', '#/devices?state=unknown'),
          card(c.converged, 'Converged', convergedKind(c), '#/devices?state=problem'))),
      chart.el,
      h('h2', { text: 'Deployments' }),
      table('Deployments and their rollout progress',
        ['Name', 'Strategy', 'Revision', 'Progress', h('th', { class: 'num', scope: 'col', text: 'Targeted' }), h('th', { class: 'num', scope: 'col', text: 'Updated' }),
          h('th', { class: 'num', scope: 'col', text: 'Ready' }), h('th', { class: 'num', scope: 'col', text: 'Failed' }), 'State'],
        deps.map((d) => {
          const s = d.status || {};
          return h('tr', {},
            h('td', {}, h('a', { href: deploymentHref(d.metadata.name), text: d.metadata.name })),
            h('td', { text: (d.spec.strategy && d.spec.strategy.type) || 'AllAtOnce' }),
            h('td', { text: s.revision || '—' }),
            h('td', { class: 'progress' }, bar(s)),
            h('td', { class: 'num', text: fmtInt(s.targeted) }),
            h('td', { class: 'num', text: fmtInt(s.updated) }),
            h('td', { class: 'num', text: fmtInt(s.ready) }),
            h('td', { class: 'num', text: fmtInt(s.failed) }),
            h('td', {}, deploymentPhase(d)));
        }), 'No deployments yet: fleet apply -f app.yaml'),
      h('h2', { text: 'Recent events' }),
      eventsTable(events, true));
  }

  // convergedKind colours the Converged card: a device never seen has
  // reported nothing, so it is not converged but no warning either.
  function convergedKind(c) {
    const seen = c.devices - c.unknown;
    if (!seen) return '';
    return c.converged >= seen ? 'ok' : 'warn';
  }

  function deploymentPhase(d) {
    const s = d.status || {};
    if (d.spec.paused) return badge('Paused', 'warn');
    if (s.rollout && s.rollout.phase) {
      const kind = { Complete: 'ok', Progressing: '', Paused: 'warn', Stopped: 'bad', RolledBack: 'bad' }[s.rollout.phase];
      return badge(s.rollout.phase, kind);
    }
    if (s.failed) return badge('Failing', 'bad');
    if (s.targeted && s.ready === s.targeted && s.updated === s.targeted) return badge('Complete', 'ok');
    if (s.observedGeneration === undefined) return badge('Unknown');
    return badge('Progressing');
  }

  // eventsTable lists events. On a phone each takes two lines: when,
  // where and what on the first, the pod and the message on the second.
  function eventsTable(events, withDevice) {
    return table('Recent events, newest first',
      ['Time', withDevice && 'Device', 'Type', 'Reason', 'Pod', 'Message'].filter(Boolean),
      events.map((e) => h('tr', {},
        h('td', { class: 'when' }, ago(e.time)),
        withDevice && h('td', { class: 'where' }, h('a', { href: deviceHref(e.device), text: e.device })),
        h('td', { class: 'type' }, badge(e.type, e.type === 'Warning' ? 'warn' : '')),
        h('td', { class: 'reason', text: e.reason }),
        h('td', { class: 'pod', text: [e.pod, e.container].filter(Boolean).join('/') || '—' }),
        h('td', { class: 'msg', text: e.message || '' }))),
      'No events since the hub started.', 'events');
  }

  // ---- devices ------------------------------------------------------------------

  const SORTS = [['name', 'Name'], ['state', 'Status'], ['converged', 'Converged'], ['pods', 'Pods'], ['restarts', 'Restarts'],
    ['agent', 'Agent'], ['arch', 'Arch'], ['lastSeen', 'Last seen']];

  function devicesView(params) {
    const q = {
      q: params.get('q') || '', labelSelector: params.get('sel') || '', state: params.get('state') || '',
      sort: params.get('sort') || 'name', offset: Number(params.get('offset')) || 0,
    };
    let ctrl = null; let dead = false; let first = true; let page = null;
    const notice = h('p', { class: 'notice', role: 'status' });
    const search = h('input', { id: 'f-search', type: 'search', value: q.q, placeholder: 'name, label, agent version…', autocomplete: 'off' });
    const selInput = h('input', { id: 'f-selector', type: 'text', value: q.labelSelector, placeholder: 'site=north,role in (a,b)', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'f-selector-error' });
    const selError = h('p', { id: 'f-selector-error', class: 'field-error', 'aria-live': 'polite' });
    const stateSel = h('select', { id: 'f-state' },
      [['', 'All'], ['online', 'Online'], ['offline', 'Offline'], ['stale', 'Stale'], ['unknown', 'Never seen'], ['problem', 'Needs attention']]
        .map(([val, text]) => h('option', { value: val, text, selected: val === q.state })));
    const count = h('p', { class: 'count', id: 'devices-count', 'aria-live': 'polite' });
    const tbody = h('tbody', {});
    const headRow = h('tr', {});
    const empty = h('p', { class: 'empty', hidden: true, text: 'No device matches.' });
    const prev = h('button', { type: 'button', text: 'Previous page' });
    const next = h('button', { type: 'button', text: 'Next page' });

    function syncHash() {
      const p = new URLSearchParams();
      if (q.q) p.set('q', q.q);
      if (q.labelSelector) p.set('sel', q.labelSelector);
      if (q.state) p.set('state', q.state);
      if (q.sort !== 'name') p.set('sort', q.sort);
      if (q.offset) p.set('offset', q.offset);
      const s = p.toString();
      history.replaceState(null, '', '#/devices' + (s ? '?' + s : ''));
    }

    // The header is built once; a sort only updates it, so a button
    // keeps its focus (and its node) across reloads.
    const heads = SORTS.map(([k, label]) => {
      const button = h('button', {
        type: 'button', class: 'sort', text: label,
        onclick: () => {
          const t0 = performance.now();
          q.sort = q.sort === k ? '-' + k : k;
          q.offset = 0;
          load(t0);
        },
      });
      const th = h('th', { scope: 'col', class: ['pods', 'restarts'].includes(k) ? 'num' : (['agent', 'arch'].includes(k) ? 'hide-narrow' : null) }, button);
      return { k, label, th, button };
    });
    headRow.append(...heads.map((x) => x.th), h('th', { scope: 'col', class: 'hide-narrow', text: 'Labels' }));
    const headLabels = [...SORTS.map(([, l]) => l), 'Labels'];
    const tableEl = h('table', { id: 'devices-table', class: 'fixed stack' },
      h('caption', { class: 'sr-only', text: 'Devices' }),
      h('thead', {}, headRow), tbody);

    function renderHead() {
      const key = q.sort.replace(/^-/, '');
      const desc = q.sort.startsWith('-');
      for (const { k, label, th, button } of heads) {
        const sorted = k === key;
        if (sorted) th.setAttribute('aria-sort', desc ? 'descending' : 'ascending'); else th.removeAttribute('aria-sort');
        button.setAttribute('aria-label', 'Sort by ' + label.toLowerCase() + (sorted && !desc ? ', descending' : ''));
      }
    }

    // The table leaves out fleet/device, which is the name.
    function ownLabels(labels) {
      const out = { ...labels };
      delete out['fleet/device'];
      return out;
    }

    function pickLabel(k, v) {
      const term = k + '=' + v;
      const parts = q.labelSelector.split(',').map((s) => s.trim()).filter(Boolean);
      if (!parts.includes(term)) parts.push(term);
      q.labelSelector = parts.join(',');
      selInput.value = q.labelSelector;
      q.offset = 0;
      load();
    }

    function renderRows(p) {
      tbody.replaceChildren(...p.items.map((d) => h('tr', {},
        h('td', { class: 'name' }, h('a', { href: deviceHref(d.name), text: d.name })),
        h('td', {}, stateBadge(d.state)),
        h('td', { class: 'msg' }, convergedBadge(d.state, d.converged, 'Yes', 'No'), d.problem ? h('div', { class: 'muted', text: d.problem }) : null),
        h('td', { class: 'num', text: d.ready + '/' + d.pods }),
        h('td', { class: 'num', text: fmtInt(d.restarts) }),
        h('td', { class: 'hide-narrow', text: d.agent || '—' }),
        h('td', { class: 'hide-narrow', text: d.arch || '—' }),
        h('td', {}, ago(d.lastSeen)),
        h('td', { class: 'hide-narrow' }, chips(ownLabels(d.labels), pickLabel)))));
      label(tableEl, headLabels);
      empty.hidden = p.items.length > 0;
      const from = p.matched ? p.offset + 1 : 0;
      const to = p.offset + p.items.length;
      count.textContent = `${fmtInt(from)}–${fmtInt(to)} of ${fmtInt(p.matched)}` + (p.matched !== p.total ? ` (filtered from ${fmtInt(p.total)})` : '') + ' devices';
      prev.disabled = p.offset === 0;
      next.disabled = to >= p.matched;
    }

    // pending is when the input that the next rendered rows answer was
    // made: a reload for a live change may take over from the load of an
    // input, and then answers it.
    let pending;
    async function load(t0) {
      if (t0 !== undefined) pending = t0;
      if (ctrl) ctrl.abort();
      const c = ctrl = new AbortController();
      syncHash();
      renderHead();
      const p = new URLSearchParams({ limit: PAGE_SIZE, offset: q.offset, sort: q.sort });
      if (q.q) p.set('q', q.q);
      if (q.labelSelector) p.set('labelSelector', q.labelSelector);
      if (q.state) p.set('state', q.state);
      try {
        page = await api('/v1/dashboard/devices?' + p, { signal: c.signal });
      } catch (e) {
        if (e.name === 'AbortError' || dead || c !== ctrl) return;
        if (e instanceof HTTPError && e.status === 400) {
          selError.textContent = e.message;
          selInput.setAttribute('aria-invalid', 'true');
          return;
        }
        if (e instanceof NetError) { notice.className = 'notice warn'; notice.textContent = 'The connection to the hub was lost: reconnecting.'; return; }
        if (e instanceof HTTPError && e.status === 401) return;
        notice.className = 'notice error';
        notice.textContent = 'Could not load the devices: ' + e.message;
        return;
      }
      if (dead || c !== ctrl) return;
      const fetched = performance.now();
      notice.textContent = '';
      notice.className = 'notice';
      selError.textContent = '';
      selInput.removeAttribute('aria-invalid');
      renderRows(page);
      const rendered = performance.now();
      // After the rows are painted: the next frame, then a task.
      const wasFirst = first;
      const input = pending;
      first = false;
      pending = undefined;
      requestAnimationFrame(() => setTimeout(() => {
        const now = performance.now();
        if (wasFirst && perf.devicesFirstRender === null) perf.devicesFirstRender = now;
        if (input !== undefined) perf.filters.push({ ms: now - input, fetch: fetched - input, render: rendered - fetched, matched: page.matched });
      }, 0));
    }

    search.addEventListener('input', () => { const t0 = performance.now(); q.q = search.value; q.offset = 0; load(t0); });
    selInput.addEventListener('input', () => { const t0 = performance.now(); q.labelSelector = selInput.value; q.offset = 0; load(t0); });
    stateSel.addEventListener('change', () => { const t0 = performance.now(); q.state = stateSel.value; q.offset = 0; load(t0); });
    prev.addEventListener('click', () => { q.offset = Math.max(0, q.offset - PAGE_SIZE); load(); });
    next.addEventListener('click', () => { q.offset += PAGE_SIZE; load(); });

    return {
      mount() {
        document.title = 'Devices · Fleet';
        main.replaceChildren(
          h('h1', { text: 'Devices' }), notice,
          h('div', { class: 'filters', role: 'search', 'aria-label': 'Filter devices' },
            h('div', {}, h('label', { for: 'f-search', text: 'Search' }), search),
            h('div', {}, h('label', { for: 'f-selector', text: 'Label selector' }), selInput, selError),
            h('div', {}, h('label', { for: 'f-state', text: 'Status' }), stateSel)),
          h('div', { class: 'table-wrap' }, tableEl, empty),
          h('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, next, count));
        load();
      },
      refresh() { load(); },
      onChange(ch) { if (ch.allDevices || (ch.devices && ch.devices.length)) load(); },
      offline() { notice.className = 'notice warn'; notice.textContent = 'The connection to the hub was lost: reconnecting. What is shown may be out of date.'; },
      destroy() { dead = true; if (ctrl) ctrl.abort(); },
    };
  }

  // ---- one device -----------------------------------------------------------------

  function deviceView(name) {
    const chart = chartBox('device', 'device', 'Memory, disk and temperature, as ' + name + ' reported them', deviceSummary);
    const v = live(name, async () => {
      const [dev, events, hist] = await Promise.all([
        api('/v1/devices/' + enc(name)),
        api('/v1/devices/' + enc(name) + '/events').catch((e) => { if (e.status === 404) return { items: [] }; throw e; }),
        api(historyURL.device(name)).catch((e) => { if (e.status === 404) return null; throw e; }),
      ]);
      return { dev, events: (events.items || []).slice().reverse(), hist };
    }, (d) => {
      if (d.hist) chart.update(historyURL.device(name), d.hist);
      return renderDevice(d, v, d.hist ? chart : null);
    });
    v.onChange = (ch) => { if (ch.allDevices || (ch.devices || []).includes(name)) v.refresh(); };
    return v;
  }

  function renderDevice({ dev, events }, v, chart) {
    const st = dev.status || {};
    const state = deviceState(st);
    const m = dev.metadata;
    const agent = st.agent || {};
    const node = st.node || {};
    const ann = m.annotations || {};
    const readOnly = app.session.readOnly;
    const pods = st.pods || [];
    const podRows = [];
    for (const p of pods) {
      podRows.push(h('tr', { 'data-pod': p.name },
        h('td', {}, h('a', { href: deploymentHref(p.name), text: p.name })),
        h('td', {}, podPhase(state, p)),
        h('td', {}, state !== 'online' ? badge('Unknown', '') : p.ready ? badge('Ready', 'ok') : badge('Not ready', 'warn')),
        h('td', { class: 'num', text: fmtInt(p.restarts) }),
        h('td', { class: 'mono', text: (p.hash || '').slice(0, 8) || '—' }),
        h('td', { class: 'msg' }, lastReport(state, st.lastSeen, p), failedRevision(p.failedRevision), p.message || ''),
        h('td', { 'data-label': '' }, h('button', {
          type: 'button', 'data-admin': 'restart', disabled: readOnly,
          'aria-label': 'Restart pod ' + p.name + ' (restarts deployment ' + p.name + ' on every device)',
          title: readOnly ? 'Read-only: your token has the monitor role' : 'Restart deployment ' + p.name + ' on every device',
          text: 'Restart…', onclick: () => restartDeployment(p.name, v),
        }))));
      for (const c of p.containers || []) {
        podRows.push(h('tr', { class: 'sub' },
          h('td', {}, h('span', { class: 'muted', text: '↳ ' }), c.name),
          h('td', {}, badge(c.state || 'unknown', c.state === 'running' ? 'ok' : (c.reason === 'Completed' ? '' : 'warn'))),
          h('td', { text: c.reason || '' }),
          h('td', { class: 'num', text: fmtInt(c.restarts) }),
          h('td', { class: 'mono', text: c.state === 'exited' ? 'exit ' + c.exitCode : '' }),
          h('td', { class: 'msg' }, h('code', { text: c.image }), c.startedAt ? [' · started ', ago(c.startedAt)] : ''),
          h('td', {})));
      }
    }
    return h('div', {},
      h('h1', {}, h('span', { text: m.name }), stateBadge(state), state === 'unknown' ? null : convergedBadge(state, st.converged, 'Converged', 'Not converged')),
      h('p', {}, h('a', { href: '#/devices', text: '← All devices' })),
      h('div', { class: 'grid2' },
        h('section', { class: 'panel', 'aria-labelledby': 'dev-facts' },
          h('h2', { id: 'dev-facts', text: 'Device' }),
          facts([
            ['Status', stateBadge(state)],
            ['Last seen', ago(st.lastSeen)],
            ['Agent', agent.version || '—'],
            ['OS / arch', (agent.os || '—') + ' / ' + (agent.arch || '—')],
            ['Generation', `observed ${st.observedGeneration || 0} of desired ${st.desiredGeneration || 0}`],
            ['Labels', chips(m.labels)],
            Object.keys(ann).length && ['Annotations', h('div', {}, Object.keys(ann).sort().map((k) => h('div', {}, h('code', { text: k }), ': ', h('span', { text: ann[k] }))))],
            ['Registered', ago(m.creationTimestamp)],
          ])),
        h('section', { class: 'panel', 'aria-labelledby': 'dev-node' },
          h('h2', { id: 'dev-node', text: 'Node' }),
          facts([
            ['Hostname', node.hostname || '—'],
            ['Memory', node.memoryTotalBytes ? `${fmtBytes(node.memoryAvailableBytes)} free of ${fmtBytes(node.memoryTotalBytes)}` : '—'],
            ['Disk', node.diskTotalBytes ? `${fmtBytes(node.diskFreeBytes)} free of ${fmtBytes(node.diskTotalBytes)}` : '—'],
            ['Uptime', node.uptimeSeconds ? fmtDuration(node.uptimeSeconds) : '—'],
          ]),
          h('p', { class: 'muted', text: 'Live metrics (fleet top) and crash reports appear here once the hub collects them.' }))),
      chart ? chart.el : null,
      h('h2', { text: 'Pods' }),
      readOnly ? h('p', { class: 'muted', text: 'Read-only: your token has the monitor role, so the actions are disabled.' })
        : h('p', { class: 'muted', text: 'Fleet restarts a pod by restarting its deployment on every device it targets (fleet rollout restart): there is no single-device restart yet.' }),
      table('Pods and containers on ' + m.name, ['Pod / container', 'Phase / state', 'Ready / reason', h('th', { class: 'num', scope: 'col', text: 'Restarts' }), 'Hash / exit', 'Message / image', h('th', { scope: 'col' }, h('span', { class: 'sr-only', text: 'Actions' }))],
        podRows, 'No pods: no deployment targets this device, or it has not reported yet.'),
      h('h2', { text: 'Events' }),
      eventsTable(events, false));
  }

  // ---- one deployment -------------------------------------------------------------

  function deploymentView(name) {
    const chart = chartBox('deployment', 'rollout', 'Rollout of ' + name + ' over time: devices updated, ready and failed per wave', rolloutSummary);
    const v = live(name, async () => {
      const [dep, revs, devs, hist] = await Promise.all([
        api('/v1/deployments/' + enc(name)),
        api('/v1/deployments/' + enc(name) + '/revisions').catch(() => ({ items: [] })),
        api('/v1/dashboard/devices?' + new URLSearchParams({ pod: name, sort: 'state', limit: 100 })),
        api(historyURL.deployment(name)).catch((e) => { if (e.status === 404) return null; throw e; }),
      ]);
      return { dep, revs: revs.items || [], devs, hist };
    }, (d) => {
      if (d.hist) chart.update(historyURL.deployment(name), d.hist);
      return renderDeployment(d, v, d.hist ? chart : null);
    });
    v.onChange = (ch) => { if (ch.allDevices || (ch.devices || []).length || (ch.deployments || []).includes(name)) v.refresh(); };
    return v;
  }

  // describeSelector writes a label selector in kubectl's grammar, as the
  // devices view takes it.
  function describeSelector(sel) {
    const out = [];
    for (const [k, val] of Object.entries((sel && sel.matchLabels) || {})) out.push(k + '=' + val);
    for (const e of (sel && sel.matchExpressions) || []) {
      if (e.operator === 'Exists') out.push(e.key);
      else if (e.operator === 'DoesNotExist') out.push('!' + e.key);
      else out.push(`${e.key} ${e.operator === 'In' ? 'in' : 'notin'} (${(e.values || []).join(',')})`);
    }
    return out.join(',');
  }

  function renderDeployment({ dep, revs, devs }, v, chart) {
    const name = dep.metadata.name;
    const s = dep.status || {};
    const spec = dep.spec;
    const strategy = spec.strategy || {};
    const ro = s.rollout;
    const readOnly = app.session.readOnly;
    const paused = !!spec.paused;
    const adminButton = (action, text, onclick, label) => h('button', {
      type: 'button', 'data-admin': action, disabled: readOnly, onclick, 'aria-label': label || text,
      title: readOnly ? 'Read-only: your token has the ' + app.session.role + ' role' : null, text,
    });
    // A monitor gets no pod template (the API leaves it out): no images,
    // commands or env values.
    const tmpl = spec.template && spec.template.spec;
    const containers = ((tmpl && tmpl.containers) || []).map((c) => h('tr', {},
      h('td', { text: c.name }),
      h('td', {}, h('code', { text: c.image })),
      h('td', { class: 'msg' }, [...(c.command || []), ...(c.args || [])].length ? h('code', { text: [...(c.command || []), ...(c.args || [])].join(' ') }) : '—'),
      h('td', { class: 'msg' }, (c.env || []).map((e) => h('div', {}, h('code', { text: e.name + (e.value !== undefined ? '=' + e.value : ' (from ' + Object.keys(e.valueFrom || {}).join(',') + ')') }))))));
    const steps = (strategy.staged && strategy.staged.steps) || [];
    const waves = steps.length ? h('ol', { class: 'waves', 'aria-label': 'Waves' }, steps.map((st, i) => {
      const n = i + 1;
      const cur = ro && ro.step === n && !['Complete'].includes(ro.phase);
      const done = ro && (ro.phase === 'Complete' || ro.step > n);
      const what = st.devices ? `${st.devices} device${st.devices > 1 ? 's' : ''}` : `${st.percent}%`;
      return h('li', { class: cur ? 'current' : done ? 'done' : '', 'aria-current': cur ? 'step' : null },
        `Wave ${n}: ${what}` + (st.pause ? `, then pause ${st.pause}` : '') + (done ? ' — done' : cur ? ' — ' + (ro.phase || 'current').toLowerCase() : ''));
    })) : null;
    const revRows = revs.map((r) => h('tr', { 'data-revision': r.revision },
      h('td', {}, String(r.revision), r.revision === s.revision ? [' ', badge('current', 'ok')] : ''),
      h('td', {}, ago(r.createdAt)),
      h('td', { class: 'msg', text: r.changeCause || '—' }),
      h('td', {}, r.outcome ? badge(r.outcome, r.outcome === 'Complete' ? 'ok' : 'bad') : h('span', { class: 'muted', text: '—' })),
      h('td', { class: 'msg', text: r.reason || '' }),
      h('td', { class: 'mono', text: (r.hash || '').slice(0, 8) })));
    const devRows = devs.items.map((d) => {
      const p = d.pod || {};
      const updated = p.hash && p.hash === p.desiredHash;
      const failed = p.failedRevision && p.failedRevision.hash === p.desiredHash;
      return h('tr', { 'data-device': d.name },
        h('td', {}, h('a', { href: deviceHref(d.name), text: d.name })),
        h('td', {}, stateBadge(d.state)),
        h('td', {}, p.phase ? podPhase(d.state, p) : h('span', { class: 'muted', text: 'not reported' })),
        h('td', {}, d.state === 'unknown' ? convergedBadge(d.state) : updated ? badge('Updated', 'ok') : failed ? badge('Failed, went back', 'bad') : badge('Not yet', 'warn')),
        h('td', { class: 'num', text: fmtInt(p.restarts) }),
        h('td', { class: 'msg' }, p.phase ? lastReport(d.state, d.lastSeen, p) : null, failedRevision(p.failedRevision),
          (p.images && p.images.length ? [h('code', { text: p.images.join(', ') }), ' '] : ''), p.message || ''));
    });
    const conds = (s.conditions || []).map((c) => h('li', {}, h('strong', { text: c.type + ' ' + c.status }), ': ' + (c.reason || ''), c.message ? ' — ' + c.message : ''));
    return h('div', {},
      h('h1', {}, h('span', { text: name }), deploymentPhase(dep)),
      h('p', {}, h('a', { href: '#/', text: '← Overview' })),
      h('div', { class: 'actions', role: 'group', 'aria-label': 'Rollout actions' },
        paused ? adminButton('resume', 'Resume rollout', () => pauseDeployment(name, false, v))
          : adminButton('pause', 'Pause rollout', () => pauseDeployment(name, true, v)),
        adminButton('undo', 'Undo rollout…', () => undoDeployment(name, v), 'Undo rollout: go back to the previous good revision'),
        adminButton('restart', 'Restart…', () => restartDeployment(name, v), 'Restart the pod on every device'),
        readOnly ? h('span', { class: 'muted', text: 'Read-only: actions need the admin token.' }) : null),
      h('div', { class: 'grid2' },
        h('section', { class: 'panel', 'aria-labelledby': 'dep-status' },
          h('h2', { id: 'dep-status', text: 'Rollout' }),
          bar(s),
          facts([
            ['Revision', s.revision ? String(s.revision) : '—'],
            ['Devices', `${fmtInt(s.targeted)} targeted, ${fmtInt(s.updated)} updated, ${fmtInt(s.ready)} ready, ${fmtInt(s.failed)} failed, ${fmtInt(s.pending)} pending`],
            ro && ['Phase', `${ro.phase}, step ${ro.step} of ${ro.steps}`],
            ro && ro.waiting && ['Waiting for', ro.waiting + (ro.waitUntil ? ' (until ' + dateFormat.format(new Date(ro.waitUntil)) + ')' : '')],
            ro && ro.reason && ['Reason', ro.reason],
            ro && ro.lastGoodRevision && ['Last good revision', String(ro.lastGoodRevision)],
          ]),
          waves,
          conds.length ? h('ul', {}, conds) : null),
        h('section', { class: 'panel', 'aria-labelledby': 'dep-spec' },
          h('h2', { id: 'dep-spec', text: 'Spec' }),
          facts([
            ['Selector', describeSelector(spec.selector) ? h('code', { text: describeSelector(spec.selector) }) : 'every device'],
            ['Strategy', (strategy.type || 'AllAtOnce') + (strategy.rollingUpdate && strategy.rollingUpdate.maxUnavailable ? ', maxUnavailable ' + strategy.rollingUpdate.maxUnavailable : '')],
            ['Paused', paused ? 'yes: no device moves to a new template until resumed' : 'no'],
            ['Generation', String(dep.metadata.generation || 0)],
            ['Restart policy', tmpl ? tmpl.restartPolicy || 'Always' : '—'],
          ]))),
      chart ? chart.el : null,
      h('h2', { text: 'Containers' }),
      table('Containers of ' + name, ['Name', 'Image', 'Command', 'Environment'], containers,
        tmpl ? 'No containers.' : 'Hidden: the pod template is shown to viewers and admins only.'),
      ro && ro.events && ro.events.length ? [h('h2', { text: 'Rollout events' }), eventsTable(ro.events.slice().reverse().map((e) => ({ ...e, pod: name })), false)] : null,
      h('h2', { text: 'Revision history' }),
      table('Revisions of ' + name + ', newest first', ['Revision', 'Created', 'Change cause', 'Outcome', 'Reason', 'Hash'], revRows, 'No revision recorded yet.'),
      h('h2', { text: 'Devices' }),
      h('p', { class: 'muted' }, devs.matched > devs.items.length ? `The first ${devs.items.length} of ${fmtInt(devs.matched)} devices, those needing attention first. ` : '',
        h('a', { href: '#/devices' + (describeSelector(spec.selector) ? '?sel=' + enc(describeSelector(spec.selector)) : ''), text: 'The targeted devices in the devices view' })),
      table('Devices running ' + name, ['Device', 'Status', 'Pod', 'Template', h('th', { class: 'num', scope: 'col', text: 'Restarts' }), 'Message'], devRows, 'No device is targeted.'));
  }

  // ---- admin actions (the API refuses them to a monitor anyway) -------------------

  function confirmDialog(title, text, confirmText) {
    return new Promise((resolve) => {
      const ok = h('button', { type: 'button', class: 'primary', text: confirmText });
      const cancel = h('button', { type: 'button', text: 'Cancel' });
      const dlg = h('dialog', { 'aria-labelledby': 'dlg-title', 'aria-describedby': 'dlg-text' },
        h('h2', { id: 'dlg-title', text: title }), h('p', { id: 'dlg-text', text }), h('div', { class: 'actions' }, cancel, ok));
      const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
      ok.addEventListener('click', () => done(true));
      cancel.addEventListener('click', () => done(false));
      dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
      document.body.append(dlg);
      dlg.showModal();
      cancel.focus();
    });
  }

  // modify does a read-modify-write of a deployment, as `fleet rollout`
  // does; mutate returns false when there is nothing to write.
  async function modify(name, mutate) {
    for (let i = 0; i < 5; i++) {
      const d = await api('/v1/deployments/' + enc(name));
      if (!mutate(d)) return false;
      delete d.status;
      try {
        await api('/v1/deployments/' + enc(name), { method: 'PUT', body: d });
        return true;
      } catch (e) {
        if (!(e instanceof HTTPError && e.status === 409)) throw e;
      }
    }
    throw new Error('the deployment kept changing under us; try again');
  }

  async function act(v, what, fn) {
    try {
      const msg = await fn();
      if (msg) { v.note(msg, 'ok'); announce(msg); }
      v.refresh();
    } catch (e) {
      if (e instanceof HTTPError && e.status === 401) return;
      const msg = what + ' failed: ' + e.message;
      v.note(msg, 'error');
      announce(msg);
    }
  }

  function pauseDeployment(name, pause, v) {
    return act(v, pause ? 'Pause' : 'Resume', async () => {
      const written = await modify(name, (d) => {
        if (!!d.spec.paused === pause) return false;
        d.spec.paused = pause;
        return true;
      });
      if (!written) return `deployment/${name} is already ${pause ? 'paused' : 'running'}`;
      return `deployment/${name} ${pause ? 'paused' : 'resumed'}`;
    });
  }

  async function undoDeployment(name, v) {
    if (!await confirmDialog('Undo the rollout of ' + name + '?',
      'Every device goes back to the previous revision that did not fail (fleet rollout undo deployment/' + name + ').', 'Undo rollout')) return;
    return act(v, 'Undo', async () => {
      const r = await api('/v1/deployments/' + enc(name) + '/rollback', { method: 'POST', body: {} });
      return r.unchanged ? `deployment/${name} already runs revision ${r.toRevision}` : `deployment/${name} rolled back from revision ${r.fromRevision} to ${r.toRevision}`;
    });
  }

  async function restartDeployment(name, v) {
    if (!await confirmDialog('Restart ' + name + ' everywhere?',
      'Fleet restarts a pod by restarting its deployment: every device that runs ' + name +
      ' replaces its containers, per the deployment\'s strategy (fleet rollout restart deployment/' + name + ').', 'Restart')) return;
    return act(v, 'Restart', async () => {
      const at = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      await modify(name, (d) => {
        if (d.spec.paused) throw new Error(`deployment/${name} is paused: resume it first`);
        const t = d.spec.template;
        t.metadata = t.metadata || {};
        t.metadata.annotations = t.metadata.annotations || {};
        t.metadata.annotations['fleet/restartedAt'] = at;
        return true;
      });
      return `deployment/${name} restarted`;
    });
  }

  // ---- start ------------------------------------------------------------------------

  async function boot() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return showLogin('');
    app.token = token;
    try {
      start(await api('/v1/dashboard/session'));
    } catch (e) {
      if (e instanceof HTTPError && e.status === 401) return; // sessionEnded showed the login
      if (e instanceof NetError) {
        main.replaceChildren(h('p', { class: 'notice warn', role: 'status', text: 'Cannot reach the hub: retrying…' }));
        setTimeout(boot, 2000);
        return;
      }
      showLogin('Could not start: ' + e.message);
    }
  }
  boot();
})();
