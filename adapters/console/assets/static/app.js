// The operators' console of the delivery ledger: a single-page application over the public HTTP
// API (docs/api.md), with hash routes:
//
//   #/overview            counters per state and channel, deliveries per minute, DLQ size, lag
//   #/deliveries?...      the list with the filters of GET /v1/deliveries, lookups by id and key
//   #/deliveries/<id>     status, history, payload, and the decisions the state allows
//   #/dlq?...             GET /v1/dlq with its filters, and bulk replay through a replay job
//   #/replays/<id>        a replay job's progress
//   #/suppressions?...    the suppression list searched by channel and recipient, and an add form
//   #/suppressions/<id>   one entry with its evidence, and its removal with a reason
//
// Rules the whole file keeps:
// - Every request goes to this origin, to a path under /v1/ (api() refuses anything else), with
//   the tenant's key in the Authorization header. The key lives in sessionStorage only: never in
//   a URL, a cookie or localStorage, and "Sign out" removes it.
// - Data is rendered with textContent and setAttribute only, never innerHTML: whatever a
//   delivery's recipient, payload or error says is shown as text.
// - No inline script or style: the Content-Security-Policy forbids them.
'use strict';

(() => {
  const KEY_STORAGE = 'ledger.console.apiKey';
  const STATES = ['accepted', 'scheduled', 'queued', 'processing', 'retrying', 'delivered', 'dead', 'unknown', 'cancelled', 'suppressed'];
  // A delivery page polls while the delivery is in none of these. unknown waits for an operator
  // (or a receipt), which the page's own action or a reload shows.
  const SETTLED = new Set(['delivered', 'dead', 'unknown', 'cancelled', 'suppressed']);
  const FAILURE_CLASSES = ['permanent', 'transient', 'unknown', 'panic'];
  const POLL_MS = 1000;
  const OVERVIEW_REFRESH_MS = 30000;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

  const main = document.getElementById('main');
  const nav = document.getElementById('nav');

  // ---------------------------------------------------------------------------------------
  // DOM helpers: every node is built here, text goes in as text.

  // el builds an element. attrs sets attributes (false and null leave one out, true sets it
  // empty); "text" sets textContent; "on" maps event names to handlers. Children are nodes or
  // strings (as text); null, false and undefined are skipped; arrays are flattened.
  function el(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }

  function build(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'text') {
        node.textContent = String(value);
      } else if (name === 'on') {
        for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
      } else {
        node.setAttribute(name, value === true ? '' : String(value));
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function badge(state) {
    return el('span', { class: 'badge state-' + cssToken(state), text: state || '?' });
  }

  // cssToken keeps a class name to what the stylesheet knows; anything else gets no colour.
  function cssToken(s) {
    return /^[a-z_]+$/.test(String(s)) ? String(s) : 'other';
  }

  function fmtTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    // The year only when it is not this one: the full time is in the element's title.
    return d.toLocaleString(undefined, {
      year: d.getFullYear() === new Date().getFullYear() ? undefined : 'numeric', month: 'short', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
  }

  function timeEl(iso) {
    if (!iso) return '';
    return el('time', { datetime: iso, title: iso, text: fmtTime(iso) });
  }

  function fmtNumber(n) {
    return typeof n === 'number' ? n.toLocaleString() : String(n ?? '');
  }

  function deliveryLink(id, text) {
    return el('a', { href: '#/deliveries/' + encodeURIComponent(id), class: 'mono', text: text || id });
  }

  function facts(pairs, cls) {
    const dl = el('dl', { class: cls || 'facts' });
    for (const [label, value] of pairs) {
      if (value === undefined || value === null || value === '') continue;
      append(dl, [el('dt', { text: label }), el('dd', {}, value)]);
    }
    return dl;
  }

  function field(id, label, control, hint) {
    control.id = id;
    const parts = [el('label', { for: id, text: label }), control];
    if (hint) {
      const hintID = id + '-hint';
      control.setAttribute('aria-describedby', hintID);
      parts.push(el('span', { id: hintID, class: 'hint', text: hint }));
    }
    return el('div', { class: 'field' }, parts);
  }

  // actorField is the optional "who" of a decision: the API records the key's tenant
  // ("tenant:acme") when it is left empty.
  function actorField(id) {
    const input = el('input', { name: 'actor', maxlength: '500', autocomplete: 'off', placeholder: 'you@example.com' });
    return { input, field: field(id, 'Actor (optional)', input, 'Who decides, recorded in the history; empty: the tenant of this key.') };
  }

  // withActor adds the actor to a request body when one is given.
  function withActor(body, actor) {
    const a = actor.value.trim();
    return a ? { ...body, actor: a } : body;
  }

  function select(name, options, value) {
    const s = el('select', { name });
    for (const [v, label] of options) s.append(el('option', { value: v, text: label, selected: v === value }));
    return s;
  }

  function tableOf(caption, head, rows, opts) {
    const o = opts || {};
    const thead = el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col', class: h.num ? 'num' : null, text: h.label || h }))));
    const tbody = el('tbody', {}, rows);
    return el('div', { class: 'table-wrap', tabindex: o.focusable === false ? null : '0', role: 'region', 'aria-label': caption },
      el('table', { id: o.id }, el('caption', { text: caption }), thead, tbody, o.foot || null));
  }

  // problemBox shows an API problem (title, detail, field) or any other failure.
  function problemBox(err) {
    const box = el('div', { class: 'problem', role: 'alert' });
    if (err instanceof ApiError) {
      append(box, [
        el('p', {}, el('strong', { class: 'problem-title', text: err.title + ' (' + err.status + ')' })),
        err.detail ? el('p', { class: 'problem-detail', text: err.detail }) : null,
        err.field ? el('p', { class: 'problem-field' }, 'Field: ', el('code', { text: err.field })) : null,
      ]);
    } else {
      append(box, [el('p', {}, el('strong', { class: 'problem-title', text: 'The request failed' })),
        el('p', { class: 'problem-detail', text: String(err && err.message ? err.message : err) })]);
    }
    return box;
  }

  function notice(text) {
    return el('div', { class: 'notice', role: 'status', text });
  }

  // ---------------------------------------------------------------------------------------
  // Session and API.

  const session = {
    key() {
      try { return sessionStorage.getItem(KEY_STORAGE) || ''; } catch { return ''; }
    },
    set(key) { sessionStorage.setItem(KEY_STORAGE, key); },
    clear() {
      try { sessionStorage.removeItem(KEY_STORAGE); } catch { /* storage unavailable: nothing kept */ }
    },
  };

  class ApiError extends Error {
    constructor(status, problem) {
      const p = problem || {};
      super(p.detail || p.title || ('HTTP ' + status));
      this.status = status;
      this.title = p.title || ('HTTP ' + status);
      this.detail = p.detail || '';
      this.field = p.field || '';
    }
  }

  // api calls the ledger's API on this origin. path must start with /v1/; the key is the
  // session's unless opts.key gives another (the login check). A 401 signs the console out.
  // It answers the body, or with opts.withStatus { status, data } (201 created, 200 there already).
  async function api(method, path, opts) {
    const o = opts || {};
    if (typeof path !== 'string' || !path.startsWith('/v1/')) {
      throw new Error('the console calls only the API under /v1/ of its own origin');
    }
    const key = o.key || session.key();
    const headers = { Accept: 'application/json, application/problem+json', Authorization: 'Bearer ' + key };
    const init = {
      method, headers, signal: o.signal,
      credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer', mode: 'same-origin',
    };
    if (o.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(o.body);
    }
    if (o.idempotencyKey) headers['Idempotency-Key'] = o.idempotencyKey;
    const res = await fetch(path, init);
    const type = res.headers.get('Content-Type') || '';
    const data = type.includes('json') ? await res.json().catch(() => null) : null;
    if (!res.ok) {
      const err = new ApiError(res.status, data);
      if (res.status === 401 && !o.key) signOut('The API refused the key (' + (err.detail || 'unauthorized') + '). Sign in again.');
      throw err;
    }
    return o.withStatus ? { status: res.status, data } : data;
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    const s = q.toString();
    return s ? '?' + s : '';
  }

  // newKey is an Idempotency-Key made in the browser: randomUUID where the page is a secure
  // context (https, or http on loopback), else a version 4 UUID from getRandomValues.
  function newKey() {
    if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
  }

  // Times: <input type="datetime-local"> holds local wall time; the API takes RFC 3339.
  function localToRFC3339(v) {
    if (!v) return '';
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? '' : d.toISOString();
  }

  function rfc3339ToLocal(v) {
    if (!v) return '';
    const d = new Date(v);
    if (Number.isNaN(d.getTime())) return '';
    const p = (n) => String(n).padStart(2, '0');
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes());
  }

  // ---------------------------------------------------------------------------------------
  // Pages: each render gets a page object whose signal ends when the route changes, so its
  // polls and requests stop.

  let current = null;

  function newPage() {
    if (current) current.controller.abort();
    const controller = new AbortController();
    const page = {
      controller,
      signal: controller.signal,
      get gone() { return controller.signal.aborted; },
      // every runs fn now and then every ms until the page is left or fn returns false.
      every(ms, fn) {
        let timer = null;
        const tick = async () => {
          if (page.gone) return;
          let again = true;
          try { again = (await fn()) !== false; } catch (err) { if (page.gone) return; }
          if (again && !page.gone) timer = setTimeout(tick, ms);
        };
        controller.signal.addEventListener('abort', () => clearTimeout(timer));
        tick();
      },
    };
    current = page;
    return page;
  }

  function show(title, ...children) {
    document.title = title + ' · Delivery ledger console';
    const h1 = el('h1', { tabindex: '-1', text: title });
    main.replaceChildren(h1, ...children.flat().filter(Boolean));
    return h1;
  }

  function parseHash() {
    const raw = location.hash || '';
    const at = raw.indexOf('?');
    const path = at < 0 ? raw : raw.slice(0, at);
    return { path, params: new URLSearchParams(at < 0 ? '' : raw.slice(at + 1)) };
  }

  // segment decodes a path segment of a route; a malformed one matches no delivery.
  function segment(s) {
    try { return decodeURIComponent(s); } catch { return s; }
  }

  function go(path, params) {
    location.hash = path + (params ? query(params) : '');
  }

  const routes = [
    [/^#\/overview$/, 'overview', () => overviewPage()],
    [/^#\/deliveries$/, 'deliveries', (m, params) => deliveriesPage(params)],
    [/^#\/deliveries\/([^/]+)$/, 'deliveries', (m) => deliveryPage(segment(m[1]))],
    [/^#\/dlq$/, 'dlq', (m, params) => dlqPage(params)],
    [/^#\/replays\/([^/]+)$/, 'dlq', (m) => replayPage(segment(m[1]))],
    [/^#\/suppressions$/, 'suppressions', (m, params) => suppressionsPage(params)],
    [/^#\/suppressions\/([^/]+)$/, 'suppressions', (m) => suppressionPage(segment(m[1]))],
  ];

  let signOutMessage = '';

  function route() {
    const { path, params } = parseHash();
    if (!session.key()) {
      nav.hidden = true;
      loginPage();
      return;
    }
    nav.hidden = false;
    if (!path.startsWith('#/')) {
      // A hash that is not a route (the skip link's #main) keeps the page as it is.
      if (!current) go('#/overview');
      return;
    }
    for (const [re, section, render] of routes) {
      const m = path.match(re);
      if (!m) continue;
      markNav(section);
      render(m, params);
      focusHeading();
      return;
    }
    markNav('');
    newPage();
    show('Not found', el('p', {}, 'The console has no page at ', el('code', { text: path }), '. ',
      el('a', { href: '#/overview', text: 'Go to the overview' }), '.'));
    focusHeading();
  }

  function markNav(section) {
    for (const a of nav.querySelectorAll('a[data-section]')) {
      if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  function focusHeading() {
    const h1 = main.querySelector('h1');
    if (h1) h1.focus({ preventScroll: false });
  }

  function signOut(message) {
    session.clear();
    signOutMessage = message || '';
    if (current) current.controller.abort();
    current = null;
    route();
  }

  // ---------------------------------------------------------------------------------------
  // Login.

  function loginPage() {
    const page = newPage();
    const input = el('input', { type: 'password', name: 'api-key', autocomplete: 'off', required: true, spellcheck: 'false' });
    const status = el('div', { 'aria-live': 'polite' });
    if (signOutMessage) {
      status.append(notice(signOutMessage));
      signOutMessage = '';
    }
    const button = el('button', { type: 'submit', class: 'button', id: 'sign-in', text: 'Sign in' });
    const form = el('form', { id: 'login-form', class: 'panel', novalidate: true },
      el('p', { class: 'muted' }, 'Enter your tenant\'s API key. The console keeps it in this tab\'s session storage only, ' +
        'sends it only to this server\'s API, and forgets it when you sign out or close the tab.'),
      field('api-key', 'API key', input),
      el('div', { class: 'actions-row' }, button),
      status);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const key = input.value.trim();
      status.replaceChildren();
      if (!key) {
        status.append(problemBox(new Error('Enter an API key.')));
        input.focus();
        return;
      }
      button.disabled = true;
      try {
        // Any endpoint of the tenant's checks the key; the stats are cheap.
        await api('GET', '/v1/stats', { key, signal: page.signal });
      } catch (err) {
        button.disabled = false;
        if (err instanceof ApiError && err.status !== 401 && err.status !== 400) {
          // The key is good but the stats are not served here (no views): go on.
        } else {
          status.append(problemBox(err));
          input.select();
          return;
        }
      }
      session.set(key);
      input.value = '';
      const { path } = parseHash();
      if (!path.startsWith('#/')) go('#/overview');
      else route();
    });
    main.replaceChildren(el('div', { class: 'login' }, el('h1', { tabindex: '-1', text: 'Sign in to the console' }), form));
    document.title = 'Sign in · Delivery ledger console';
    input.focus();
  }

  // ---------------------------------------------------------------------------------------
  // Overview.

  function overviewPage() {
    const page = newPage();
    const cards = el('div', { class: 'cards', id: 'overview-cards' });
    const statsBox = el('section', { class: 'panel', 'aria-labelledby': 'stats-h' },
      el('h2', { id: 'stats-h', text: 'Deliveries per state and channel' }));
    const statsBody = el('div', { id: 'stats', 'aria-busy': 'true' }, el('p', { class: 'muted', text: 'Loading…' }));
    statsBox.append(statsBody);
    const chartBox = el('section', { class: 'panel', 'aria-labelledby': 'chart-h' },
      el('h2', { id: 'chart-h', text: 'Deliveries per minute, last hour' }));
    const chartBody = el('div', { id: 'chart', 'aria-busy': 'true' }, el('p', { class: 'muted', text: 'Loading…' }));
    chartBox.append(chartBody);
    const refresh = el('button', { type: 'button', class: 'button button-secondary', id: 'refresh', text: 'Refresh' });
    const updated = el('span', { class: 'live', 'aria-live': 'polite' });
    show('Overview', el('div', { class: 'actions-row toolbar' }, refresh, updated), cards, statsBox, chartBox);

    let stats = null;
    let chart = null;
    const load = async () => {
      const [s, c] = await Promise.allSettled([
        api('GET', '/v1/stats', { signal: page.signal }),
        loadChart(page.signal),
      ]);
      if (page.gone) return false;
      stats = s.status === 'fulfilled' ? s.value : null;
      chart = c.status === 'fulfilled' ? c.value : null;
      chartError = c.status === 'rejected' ? c.reason : null;
      renderCards(cards, stats, chart);
      statsBody.replaceChildren(stats ? statsTable(stats) : problemBox(s.reason));
      statsBody.setAttribute('aria-busy', 'false');
      drawChart();
      chartBody.setAttribute('aria-busy', 'false');
      updated.textContent = 'Updated ' + new Date().toLocaleTimeString();
      return true;
    };
    let chartError = null;
    // The chart is drawn at its box's width, one unit a pixel, so its text stays legible from a
    // phone to a wide screen; a resize draws it again.
    const drawChart = () => {
      chartBody.replaceChildren(...(chart ? chartView(chart, chartBody.clientWidth) : [problemBox(chartError)]));
    };
    let resizing = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => { if (!page.gone && (chart || chartError)) drawChart(); }, 100);
    }, { signal: page.signal });
    refresh.addEventListener('click', () => { load(); });
    page.every(OVERVIEW_REFRESH_MS, load);
  }

  function renderCards(cards, stats, chart) {
    const card = (id, label, figure, extra) => el('div', { class: 'card', id },
      el('div', { class: 'label', text: label }), el('div', { class: 'figure', text: figure }), extra || null);
    const dlq = stats ? (stats.states.dead || 0) + (stats.states.unknown || 0) : null;
    const lag = chart ? chart.pending : (stats && stats.view ? stats.view.pending_events : null);
    cards.replaceChildren(
      card('card-total', 'Deliveries', stats ? fmtNumber(stats.deliveries) : '–'),
      card('card-dlq', 'In the dead-letter queue (dead + unknown)', dlq === null ? '–' : fmtNumber(dlq),
        el('a', { href: '#/dlq', text: 'Open the DLQ' })),
      card('card-lag', 'Projection lag', lag === null ? '–' : fmtNumber(lag) + ' events',
        el('div', { class: 'hint', text: lag === 0 ? 'The lists are complete.' : 'Your events the lists do not show yet.' })),
    );
  }

  function statsTable(stats) {
    const head = [{ label: 'Channel' }, ...STATES.map((s) => ({ label: s, num: true })), { label: 'Total', num: true }];
    const row = (name, states, total, th) => el('tr', { 'data-channel': name },
      el(th ? 'th' : 'td', { scope: th ? 'row' : null, text: name }),
      STATES.map((s) => el('td', { class: 'num', 'data-state': s, text: fmtNumber(states[s] || 0) })),
      el('td', { class: 'num', 'data-state': 'total', text: fmtNumber(total) }));
    const rows = stats.channels.map((c) => row(c.channel, c.states, c.deliveries, true));
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: STATES.length + 2, class: 'muted', text: 'No deliveries yet.' })));
    const foot = el('tfoot', {}, row('all', stats.states, stats.deliveries, true));
    foot.firstChild.firstChild.textContent = 'All channels';
    return tableOf('Deliveries in each state now, per channel', head, rows, { id: 'stats-table', foot });
  }

  // loadChart reads the per-minute series the server counts from the status view (GET
  // /v1/stats/minutes): accepts by accepted_at, and the deliveries that became delivered or dead
  // by when they did, whenever they were accepted, at any rate.
  async function loadChart(signal) {
    const series = await api('GET', '/v1/stats/minutes', { signal });
    const buckets = series.minutes.map((m) => ({ at: Date.parse(m.minute), accepted: m.accepted, delivered: m.delivered, dead: m.dead }));
    const start = buckets.length ? buckets[0].at : Date.now() - 60 * 60000;
    return { start, buckets, pending: series.view ? series.view.pending_events : null };
  }

  const SERIES = [['accepted', 'Accepted'], ['delivered', 'Delivered'], ['dead', 'Dead']];

  function chartView(c, width) {
    const W = Math.max(300, Math.round(width || 720));
    const H = W < 600 ? 200 : 260;
    const pad = { left: 40, right: 16, top: 12, bottom: 28 };
    const tickEvery = W < 600 ? 20 : 10; // minutes between the time labels
    const max = Math.max(1, ...c.buckets.flatMap((b) => [b.accepted, b.delivered, b.dead]));
    const yMax = niceCeil(max);
    const x = (i) => pad.left + (i + 0.5) * (W - pad.left - pad.right) / c.buckets.length;
    const y = (v) => H - pad.bottom - v * (H - pad.top - pad.bottom) / yMax;
    const totals = Object.fromEntries(SERIES.map(([k]) => [k, c.buckets.reduce((n, b) => n + b[k], 0)]));
    const summary = 'Last hour: ' + SERIES.map(([k, label]) => label.toLowerCase() + ' ' + totals[k]).join(', ') + '.';
    const chart = svg('svg', { class: 'chart', id: 'chart-svg', viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img', 'aria-labelledby': 'chart-title chart-desc' },
      svg('title', { id: 'chart-title', text: 'Deliveries per minute over the last hour' }),
      svg('desc', { id: 'chart-desc', text: summary }));
    for (const v of [0, yMax / 2, yMax]) {
      chart.append(svg('line', { class: v === 0 ? 'axis' : 'grid', x1: pad.left, x2: W - pad.right, y1: y(v), y2: y(v) }),
        svg('text', { class: 'tick', x: pad.left - 6, y: y(v) + 4, 'text-anchor': 'end', text: fmtNumber(v) }));
    }
    for (let i = 0; i <= 60; i += tickEvery) {
      const at = new Date(c.start + i * 60000);
      const px = pad.left + i * (W - pad.left - pad.right) / 60;
      const anchor = i === 0 ? 'start' : (i === 60 ? 'end' : 'middle');
      chart.append(svg('line', { class: 'grid', x1: px, x2: px, y1: pad.top, y2: H - pad.bottom }),
        svg('text', { class: 'tick', x: px, y: H - 8, 'text-anchor': anchor, text: at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) }));
    }
    for (const [k] of SERIES) {
      const points = c.buckets.map((b, i) => x(i).toFixed(1) + ',' + y(b[k]).toFixed(1)).join(' ');
      chart.append(svg('polyline', { class: 'series s-' + k, 'data-series': k, points }));
    }
    const legend = el('ul', { class: 'legend' }, SERIES.map(([k, label]) =>
      el('li', {}, el('span', { class: 'swatch swatch-' + k, 'aria-hidden': 'true' }), label + ': ',
        el('strong', { 'data-total': k, text: fmtNumber(totals[k]) }))));
    const rows = c.buckets.filter((b) => b.accepted || b.delivered || b.dead).map((b) => el('tr', {},
      el('th', { scope: 'row', text: new Date(b.at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) }),
      SERIES.map(([k]) => el('td', { class: 'num', text: fmtNumber(b[k]) }))));
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: 'Nothing in the last hour.' })));
    const note = 'Accepted by the minute each was accepted; delivered and dead by the minute each ended, whenever it was accepted. ' +
      'The current minute is still counting.';
    return [chart, legend, el('p', { class: 'hint', id: 'chart-note', text: note }),
      el('details', {}, el('summary', { text: 'Show the minutes as a table' }),
        tableOf('Deliveries per minute', [{ label: 'Minute' }, ...SERIES.map(([, l]) => ({ label: l, num: true }))], rows, { id: 'chart-table' }))];
  }

  function niceCeil(v) {
    if (v <= 4) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // ---------------------------------------------------------------------------------------
  // Deliveries list and lookups.

  const LIST_FILTERS = ['state', 'channel', 'recipient', 'since', 'until', 'limit'];

  // filterForm builds the filters of GET /v1/deliveries and /v1/dlq from the hash's params; on
  // submit it moves to path with the new ones (a new first page).
  function filterForm(id, path, params, stateOptions, extra) {
    const values = Object.fromEntries(LIST_FILTERS.map((k) => [k, params.get(k) || '']));
    const controls = {
      state: select('state', stateOptions, values.state),
      channel: el('input', { name: 'channel', value: values.channel, autocomplete: 'off', placeholder: 'webhook' }),
      recipient: el('input', { name: 'recipient', value: values.recipient, autocomplete: 'off' }),
      since: el('input', { name: 'since', type: 'datetime-local', value: rfc3339ToLocal(values.since) }),
      until: el('input', { name: 'until', type: 'datetime-local', value: rfc3339ToLocal(values.until) }),
      limit: select('limit', [['', '50'], ['100', '100'], ['500', '500']], values.limit),
    };
    const form = el('form', { id, class: 'panel', 'aria-label': 'Filters' },
      el('h2', { text: 'Filters' }),
      el('div', { class: 'form-grid' },
        field(id + '-state', 'State', controls.state),
        (extra || []).map((e) => e.field),
        field(id + '-channel', 'Channel', controls.channel),
        field(id + '-recipient', 'Recipient', controls.recipient, 'Exact address'),
        field(id + '-since', 'Accepted since', controls.since),
        field(id + '-until', 'Accepted before', controls.until),
        field(id + '-limit', 'Per page', controls.limit)),
      el('div', { class: 'actions-row' },
        el('button', { type: 'submit', class: 'button', text: 'Apply filters' }),
        el('a', { class: 'button button-secondary', href: path, text: 'Clear' })));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const next = {
        state: controls.state.value, channel: controls.channel.value.trim(), recipient: controls.recipient.value.trim(),
        since: localToRFC3339(controls.since.value), until: localToRFC3339(controls.until.value), limit: controls.limit.value,
      };
      for (const e of extra || []) next[e.name] = e.value();
      go(path, next);
    });
    return form;
  }

  function listParams(params) {
    const out = {};
    for (const k of [...LIST_FILTERS, 'cursor']) if (params.get(k)) out[k] = params.get(k);
    return out;
  }

  function pager(path, params, next, count) {
    const here = Object.fromEntries(params.entries());
    const row = el('div', { class: 'actions-row' });
    if (params.get('cursor')) {
      const first = { ...here };
      delete first.cursor;
      row.append(el('a', { class: 'button button-secondary', id: 'first-page', href: path + query(first), text: 'First page' }));
    }
    if (next) row.append(el('a', { class: 'button', id: 'next-page', href: path + query({ ...here, cursor: next }), text: 'Next page' }));
    row.append(el('span', { class: 'muted', id: 'page-count', text: count + (count === 1 ? ' row' : ' rows') + ' on this page' }));
    return row;
  }

  function lagNote(view) {
    if (!view || !view.pending_events) return null;
    return el('p', { class: 'hint', id: 'lag-note', text: 'The list does not show your latest ' + fmtNumber(view.pending_events) +
      ' events yet (projection lag); a delivery\'s own page is always current.' });
  }

  function deliveriesPage(params) {
    const page = newPage();
    const results = el('section', { id: 'results', 'aria-live': 'polite', 'aria-busy': 'true' }, el('p', { class: 'muted', text: 'Loading…' }));
    show('Deliveries',
      lookupForm(page),
      filterForm('filters', '#/deliveries', params, [['', 'Any state'], ...STATES.map((s) => [s, s])]),
      results);
    (async () => {
      try {
        const list = await api('GET', '/v1/deliveries' + query(listParams(params)), { signal: page.signal });
        const rows = list.items.map((d) => el('tr', { 'data-id': d.id, 'data-state': d.state },
          el('td', {}, deliveryLink(d.id)),
          el('td', {}, badge(d.state)),
          el('td', { text: d.channel }),
          el('td', { class: 'wrap', text: d.recipient }),
          el('td', { class: 'num', text: d.attempts + ' / ' + d.max_attempts }),
          el('td', {}, timeEl(d.accepted_at)),
          el('td', {}, timeEl(d.updated_at)),
          el('td', { class: 'wrap', text: d.last_error ? [d.last_error.class, d.last_error.status_code, d.last_error.message].filter(Boolean).join(' · ') : '' })));
        if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 8, class: 'muted', id: 'no-rows', text: 'No delivery matches these filters.' })));
        results.replaceChildren(lagNote(list.view) || '',
          tableOf('Deliveries, newest first', ['Delivery', 'State', 'Channel', 'Recipient', { label: 'Attempts', num: true }, 'Accepted', 'Updated', 'Last error'], rows, { id: 'deliveries-table' }),
          pager('#/deliveries', params, list.next_cursor, list.items.length));
      } catch (err) {
        if (!page.gone) results.replaceChildren(problemBox(err));
      }
      results.setAttribute('aria-busy', 'false');
    })();
  }

  function lookupForm(page) {
    const input = el('input', { name: 'lookup', autocomplete: 'off', spellcheck: 'false' });
    const out = el('div', { id: 'lookup-result', 'aria-live': 'polite' });
    const byID = el('button', { type: 'submit', class: 'button', id: 'lookup-id', text: 'Open delivery' });
    const byKey = el('button', { type: 'button', class: 'button button-secondary', id: 'lookup-key', text: 'Find by Idempotency-Key' });
    const form = el('form', { id: 'lookup', class: 'panel', 'aria-label': 'Look up a delivery' },
      el('h2', { text: 'Look up' }),
      field('lookup-input', 'Delivery id or Idempotency-Key', input, 'A delivery id opens its page; a key shows the deliveries its accept request created.'),
      el('div', { class: 'actions-row' }, byID, byKey), out);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = input.value.trim();
      out.replaceChildren();
      if (!v) { out.append(problemBox(new Error('Enter a delivery id or an Idempotency-Key.'))); return; }
      // Delivery ids are UUIDs; anything else can only be a key.
      if (UUID.test(v)) go('#/deliveries/' + encodeURIComponent(v));
      else byKey.click();
    });
    byKey.addEventListener('click', async () => {
      const v = input.value.trim();
      out.replaceChildren();
      if (!v) { out.append(problemBox(new Error('Enter an Idempotency-Key.'))); return; }
      try {
        const a = await api('GET', '/v1/requests/' + encodeURIComponent(v), { signal: page.signal });
        const rows = a.deliveries.map((d) => el('tr', { 'data-id': d.id },
          el('td', {}, deliveryLink(d.id)), el('td', { text: d.channel }), el('td', { class: 'wrap', text: d.recipient })));
        out.append(el('h3', { text: 'Accept request ' + v }),
          facts([['Notification', el('code', { text: a.id })], ['Accepted', timeEl(a.accepted_at)], ['Deliveries', String(a.deliveries.length)]]),
          tableOf('Deliveries of this request', ['Delivery', 'Channel', 'Recipient'], rows, { id: 'request-table' }));
      } catch (err) {
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  // ---------------------------------------------------------------------------------------
  // One delivery.

  function deliveryPage(id) {
    const page = newPage();
    const live = el('p', { class: 'live', id: 'live', 'aria-live': 'polite' });
    const statusBox = el('section', { class: 'panel', id: 'status', 'aria-labelledby': 'status-h' },
      el('h2', { id: 'status-h', text: 'Status' }), el('p', { class: 'muted', text: 'Loading…' }));
    const actionsBox = el('div', { id: 'actions' });
    const suppressedBox = el('div', { id: 'suppressed' });
    const actionResult = el('div', { id: 'action-result', 'aria-live': 'polite' });
    const payloadBox = el('section', { class: 'panel', id: 'payload', 'aria-labelledby': 'payload-h' },
      el('h2', { id: 'payload-h', text: 'Payload' }));
    const historyList = el('ol', { class: 'timeline', id: 'timeline', 'aria-label': 'History, oldest first' });
    const historyBox = el('section', { class: 'panel', id: 'history', 'aria-labelledby': 'history-h' },
      el('h2', { id: 'history-h', text: 'History' }), historyList);
    const problems = el('div', { id: 'delivery-problems' });
    show('Delivery',
      el('p', {}, el('a', { href: '#/deliveries', text: '← Deliveries' }), ' · ', el('code', { id: 'delivery-id', text: id })),
      live, problems, statusBox, suppressedBox, actionResult, actionsBox, el('div', { class: 'two-col' }, historyBox, payloadBox));

    let shownState = null;
    let shownVersion = -1;
    let polling = false;

    const refresh = async () => {
      const base = '/v1/deliveries/' + encodeURIComponent(id);
      let d;
      let events;
      try {
        [d, events] = await Promise.all([
          api('GET', base, { signal: page.signal }),
          api('GET', base + '/events', { signal: page.signal }),
        ]);
      } catch (err) {
        if (page.gone) return false;
        problems.replaceChildren(problemBox(err));
        if (err instanceof ApiError && err.status === 404) {
          statusBox.replaceChildren(el('h2', { id: 'status-h', text: 'Status' }), el('p', { text: 'No delivery of yours has this id.' }));
          return false;
        }
        return true;
      }
      if (page.gone) return false;
      problems.replaceChildren();
      // The two reads run side by side: an event committed between them is in the delivery's
      // version but not in the history read before it. The history counts as shown only once it
      // holds the delivery's version, and the page polls until it does.
      const history = events.events;
      const historyVersion = history.length ? history[history.length - 1].version : 0;
      if (d.version !== shownVersion) {
        renderStatus(statusBox, d);
        renderSuppressed(suppressedBox, d, history);
        renderTimeline(historyList, history);
        renderPayload(payloadBox, history);
        if (historyVersion >= d.version) shownVersion = d.version;
      }
      if (d.state !== shownState) {
        shownState = d.state;
        if (renderActions(actionsBox, d, page, done)) actionResult.replaceChildren();
      }
      const settled = SETTLED.has(d.state);
      live.textContent = settled ? '' : 'The delivery is ' + d.state + ': refreshing every second.';
      return !settled || historyVersion < d.version;
    };

    // done shows what an action did and follows the delivery until it settles again.
    function done(message) {
      actionResult.replaceChildren(notice(message));
      startPolling();
    }

    function startPolling() {
      if (polling) return;
      polling = true;
      page.every(POLL_MS, async () => {
        const again = await refresh();
        if (!again) polling = false;
        return again;
      });
    }
    startPolling();
  }

  function renderStatus(box, d) {
    const err = d.last_error;
    box.replaceChildren(el('h2', { id: 'status-h', text: 'Status' }), facts([
      ['State', el('span', { id: 'delivery-state', 'data-state': d.state }, badge(d.state))],
      ['Channel', d.channel],
      ['Recipient', d.recipient],
      ['Priority', d.priority],
      ['Attempts', d.attempts + ' of ' + d.max_attempts],
      ['Provider', d.provider],
      ['Provider operation', d.provider_operation_id],
      ['Last error', err ? [err.class, err.status_code ? 'HTTP ' + err.status_code : '', err.message].filter(Boolean).join(' · ') : ''],
      ['Next attempt', timeEl(d.next_attempt_at)],
      ['Awaiting receipt', d.awaiting_receipt ? el('span', {}, 'lookup at ', timeEl(d.awaiting_receipt.lookup_at), ', unknown after ', timeEl(d.awaiting_receipt.give_up_at)) : ''],
      ['Notification', el('code', { text: d.notification_id })],
      ['Idempotency-Key', d.idempotency_key ? el('code', { text: d.idempotency_key }) : ''],
      ['Accepted', timeEl(d.accepted_at)],
      ['First attempt', timeEl(d.first_attempt_at)],
      ['Ended', timeEl(d.terminal_at)],
      ['Updated', timeEl(d.updated_at)],
      ['Version', String(d.version)],
    ]));
  }

  // The data members of each event type worth a line, in the order they are shown (docs/api.md,
  // "Event catalogue"). Members not listed are shown after them as JSON.
  const EVENT_FIELDS = [
    ['attempt', 'Attempt'], ['cycle', 'Cycle'], ['provider', 'Provider'], ['status_code', 'Status code'],
    ['latency_ms', 'Latency'], ['error_class', 'Error class'], ['error', 'Error'], ['reason', 'Reason'],
    ['evidence', 'Evidence'], ['actor', 'Actor'], ['exhausted', 'Attempts exhausted'], ['from_unknown', 'Replayed from unknown'],
    ['next_attempt_at', 'Next attempt'], ['until', 'Until'], ['provider_operation_id', 'Provider operation'],
    ['provider_code', 'Provider code'], ['source', 'Source'], ['possible_duplicate', 'Possible duplicate'],
    ['status', 'Receipt status'], ['provider_status', 'Provider status'], ['code', 'Code'], ['detail', 'Detail'],
    ['from', 'From'], ['to', 'To'], ['check_at', 'Check at'], ['give_up_at', 'Give up at'], ['next_check_at', 'Next check'],
    ['at', 'At'], ['failed_over', 'Failed over'], ['by', 'By'], ['suppression_id', 'Suppression'], ['category', 'Category'],
    ['channel', 'Channel'], ['recipient', 'Recipient'], ['priority', 'Priority'], ['max_attempts', 'Max attempts'],
    ['notification_id', 'Notification'], ['idempotency_key', 'Idempotency-Key'],
  ];
  const TIME_FIELDS = new Set(['next_attempt_at', 'until', 'check_at', 'give_up_at', 'next_check_at', 'at']);
  const HIDDEN_FIELDS = new Set(['payload', 'payload_sha256']);

  function eventValue(name, v) {
    if (TIME_FIELDS.has(name)) return timeEl(v);
    if (name === 'latency_ms' && typeof v === 'number') return v.toFixed(1) + ' ms';
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (v !== null && typeof v === 'object') return el('code', { text: JSON.stringify(v) });
    return String(v);
  }

  function renderTimeline(list, events) {
    list.replaceChildren(...events.map((e) => {
      const data = e.data && typeof e.data === 'object' ? e.data : {};
      const known = new Set(EVENT_FIELDS.map(([k]) => k));
      const pairs = EVENT_FIELDS.filter(([k]) => data[k] !== undefined && data[k] !== '' && data[k] !== null)
        .map(([k, label]) => [label, eventValue(k, data[k])]);
      for (const [k, v] of Object.entries(data)) {
        if (!known.has(k) && !HIDDEN_FIELDS.has(k)) pairs.push([k, eventValue(k, v)]);
      }
      return el('li', { class: 'ev-' + cssToken(e.state), 'data-type': e.type, 'data-version': e.version },
        el('div', { class: 'ev-head' },
          el('span', { class: 'ev-type', text: e.type.replace(/^delivery\./, '') }),
          badge(e.state),
          timeEl(e.recorded_at),
          el('span', { class: 'muted small', text: 'v' + e.version })),
        pairs.length ? facts(pairs, 'ev-facts') : null);
    }));
  }

  function renderPayload(box, events) {
    const accepted = events.find((e) => e.type === 'delivery.accepted');
    const payload = accepted && accepted.data ? accepted.data.payload : undefined;
    box.replaceChildren(el('h2', { id: 'payload-h', text: 'Payload' }),
      payload === undefined
        ? el('p', { class: 'muted', text: 'The accepted event holds no payload.' })
        : el('pre', { class: 'payload', id: 'payload-json', tabindex: '0', 'aria-label': 'Payload as JSON', text: JSON.stringify(payload, null, 2) }));
  }

  // renderActions shows the decisions the state allows, and nothing else: cancel for scheduled,
  // replay for dead, reconcile for unknown. It reports whether it showed one.
  function renderActions(box, d, page, done) {
    box.replaceChildren();
    if (d.state === 'scheduled') box.append(cancelForm(d, page, done));
    if (d.state === 'dead') box.append(replayForm(d, page, done));
    if (d.state === 'unknown') box.append(reconcileForm(d, page, done));
    return box.childElementCount > 0;
  }

  function cancelForm(d, page, done) {
    const reason = el('textarea', { name: 'reason', maxlength: '500' });
    const actor = actorField('cancel-actor');
    const button = el('button', { type: 'submit', class: 'button', id: 'cancel-submit', text: 'Cancel delivery' });
    const out = el('div', { 'aria-live': 'polite' });
    const when = d.next_attempt_at ? ' at ' + d.next_attempt_at : '';
    const form = el('form', { class: 'panel', id: 'cancel-form', 'aria-labelledby': 'cancel-h' },
      el('h2', { id: 'cancel-h', text: 'Cancel' }),
      el('p', {}, 'This delivery is scheduled to be sent' + when + '. A cancel ends it for good: it is never sent.'),
      field('cancel-reason', 'Reason', reason, 'Optional; recorded in the history (at most 500 characters).'),
      actor.field,
      el('div', { class: 'actions-row' }, button), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      button.disabled = true;
      try {
        // A repeat of a cancel answers the same: a double submit is harmless.
        await api('POST', '/v1/deliveries/' + encodeURIComponent(d.id) + '/cancel', { body: withActor({ reason: reason.value.trim() }, actor.input), signal: page.signal });
        form.remove();
        done('Cancelled: the delivery will not be sent.');
      } catch (err) {
        button.disabled = false;
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  function replayForm(d, page, done) {
    // One key per form: a double submit replays once (the API answers the repeat with the first).
    const key = newKey();
    const reason = el('textarea', { name: 'reason', required: true, maxlength: '500' });
    const actor = actorField('replay-actor');
    const button = el('button', { type: 'submit', class: 'button', id: 'replay-submit', text: 'Replay delivery' });
    const out = el('div', { 'aria-live': 'polite' });
    const form = el('form', { class: 'panel', id: 'replay-form', 'aria-labelledby': 'replay-h' },
      el('h2', { id: 'replay-h', text: 'Replay' }),
      el('p', {}, 'This delivery is dead. A replay starts a new cycle of attempts, numbered on from ' + d.attempts + '; the history is kept.'),
      field('replay-reason', 'Reason', reason, 'Recorded in the history (at most 500 characters).'),
      actor.field,
      el('div', { class: 'actions-row' }, button), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      if (!reason.value.trim()) { out.append(problemBox(new Error('Give a reason for the replay.'))); reason.focus(); return; }
      button.disabled = true;
      try {
        await api('POST', '/v1/deliveries/' + encodeURIComponent(d.id) + '/replay', { body: withActor({ reason: reason.value.trim() }, actor.input), idempotencyKey: key, signal: page.signal });
        form.remove();
        done('Replay accepted: the delivery is queued for attempt ' + (d.attempts + 1) + '.');
      } catch (err) {
        button.disabled = false;
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  function reconcileForm(d, page, done) {
    const outcomes = [
      ['delivered', 'Delivered', 'The evidence shows the recipient got it.'],
      ['dead', 'Dead', 'It failed for good; it goes to the dead-letter queue.'],
      ['retrying', 'Retry', 'The provider never got it: another attempt is safe (dead if none is left).'],
    ];
    const fs = el('fieldset', {}, el('legend', { text: 'Outcome' }), outcomes.map(([v, label, hint]) =>
      el('div', { class: 'choice' },
        el('input', { type: 'radio', name: 'outcome', value: v, id: 'outcome-' + v, required: true }),
        el('label', { for: 'outcome-' + v }, el('strong', { text: label }), ' — ', el('span', { class: 'hint', text: hint })))));
    const evidence = el('textarea', { name: 'evidence', required: true, maxlength: '2000' });
    const actor = actorField('reconcile-actor');
    const button = el('button', { type: 'submit', class: 'button', id: 'reconcile-submit', text: 'Record outcome' });
    const out = el('div', { 'aria-live': 'polite' });
    const form = el('form', { class: 'panel', id: 'reconcile-form', 'aria-labelledby': 'reconcile-h' },
      el('h2', { id: 'reconcile-h', text: 'Reconcile' }),
      el('p', {}, 'The outcome of attempt ' + d.attempts + ' is unknown: the call may or may not have reached the recipient. Record what the evidence shows.'),
      fs,
      field('reconcile-evidence', 'Evidence', evidence, 'A provider receipt, a log line, a ticket (at most 2000 characters; recorded as one line, line breaks become spaces).'),
      actor.field,
      el('div', { class: 'actions-row' }, button), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      const chosen = form.querySelector('input[name="outcome"]:checked');
      if (!chosen) { out.append(problemBox(new Error('Choose an outcome.'))); return; }
      if (!evidence.value.trim()) { out.append(problemBox(new Error('Give the evidence.'))); evidence.focus(); return; }
      button.disabled = true;
      try {
        await api('POST', '/v1/deliveries/' + encodeURIComponent(d.id) + '/reconcile',
          { body: withActor({ outcome: chosen.value, evidence: oneLine(evidence.value) }, actor.input), signal: page.signal });
        form.remove();
        done('Outcome recorded: ' + chosen.value + '.');
      } catch (err) {
        button.disabled = false;
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  // ---------------------------------------------------------------------------------------
  // Dead-letter queue and bulk replay.

  function dlqPage(params) {
    const page = newPage();
    const failureClass = params.get('failure_class') || '';
    const classSelect = select('failure_class', [['', 'Any class'], ...FAILURE_CLASSES.map((c) => [c, c])], failureClass);
    const filters = filterForm('dlq-filters', '#/dlq', params, [['', 'Dead and unknown'], ['dead', 'dead'], ['unknown', 'unknown']],
      [{ name: 'failure_class', field: field('dlq-filters-class', 'Failure class', classSelect), value: () => classSelect.value }]);
    const results = el('section', { id: 'dlq-results', 'aria-live': 'polite', 'aria-busy': 'true' }, el('p', { class: 'muted', text: 'Loading…' }));
    const bulk = bulkReplay(page, params);
    const jobs = el('section', { class: 'panel', id: 'jobs', 'aria-labelledby': 'jobs-h' }, el('h2', { id: 'jobs-h', text: 'Recent replay jobs' }));
    show('Dead-letter queue', filters, results, bulk, jobs);
    (async () => {
      try {
        const list = await api('GET', '/v1/dlq' + query({ ...listParams(params), failure_class: failureClass }), { signal: page.signal });
        const items = list.items;
        const rows = items.map((r) => el('tr', { 'data-id': r.id, 'data-state': r.state, 'data-failure-class': r.failure_class },
          el('td', {}, deliveryLink(r.id)),
          el('td', {}, badge(r.state), el('div', { class: 'small', text: r.failure_class + (r.exhausted ? ', attempts exhausted' : '') })),
          el('td', { class: 'wrap' }, el('div', { class: 'small muted', text: r.channel }), r.recipient),
          el('td', { class: 'num', text: r.attempts_in_cycle + ' / ' + r.max_attempts + (r.replays ? ' · ' + r.replays + ' replays' : '') }),
          el('td', { class: 'wrap wide', text: [r.last_status_code ? 'HTTP ' + r.last_status_code : '', r.last_error, r.provider ? 'via ' + r.provider : ''].filter(Boolean).join(' · ') }),
          el('td', {}, timeEl(r.entered_at)),
          el('td', {}, evidenceDetails(r.evidence))));
        if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'muted', id: 'no-rows', text: 'No dead letter matches these filters.' })));
        results.replaceChildren(lagNote(list.view) || '',
          tableOf('Dead and unknown deliveries, newest first', ['Delivery', 'State and failure class', 'Recipient',
            { label: 'Attempts this cycle', num: true }, 'Last error', 'In the DLQ since', 'Evidence'], rows, { id: 'dlq-table' }),
          pager('#/dlq', params, list.next_cursor, items.length));
      } catch (err) {
        if (!page.gone) results.replaceChildren(problemBox(err));
      }
      results.setAttribute('aria-busy', 'false');
    })();
    (async () => {
      try {
        const list = await api('GET', '/v1/replays' + query({ limit: 10 }), { signal: page.signal });
        const rows = list.items.map((j) => el('tr', { 'data-id': j.id },
          el('td', {}, el('a', { href: '#/replays/' + encodeURIComponent(j.id), class: 'mono', text: j.id })),
          el('td', {}, badge(j.state)),
          el('td', { class: 'num', text: fmtNumber(j.matched) }),
          el('td', { class: 'num', text: fmtNumber(j.replayed) }),
          el('td', { class: 'num', text: fmtNumber(j.skipped) }),
          el('td', { class: 'wrap', text: j.reason }),
          el('td', {}, timeEl(j.created_at))));
        if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'muted', text: 'No replay job yet.' })));
        jobs.append(tableOf('Replay jobs, newest first', ['Job', 'State', { label: 'Matched', num: true }, { label: 'Replayed', num: true },
          { label: 'Skipped', num: true }, 'Reason', 'Created'], rows, { id: 'jobs-table' }));
      } catch (err) {
        if (page.gone) return;
        jobs.append(err instanceof ApiError && err.status === 404
          ? el('p', { class: 'muted', text: 'This server does not run replay jobs yet.' })
          : problemBox(err));
      }
    })();
  }

  // oneLine is pasted text as the API records operator text: one line, its line breaks and tabs
  // made spaces (the API refuses control characters in what it records).
  function oneLine(text) {
    return text.replace(/[\r\n\t]+/g, ' ').trim();
  }

  function evidenceDetails(evidence) {
    if (!Array.isArray(evidence) || evidence.length === 0) return '';
    return el('details', {}, el('summary', { text: evidence.length + (evidence.length === 1 ? ' entry' : ' entries') }),
      el('ol', { class: 'evidence-list' }, evidence.map((e) => el('li', {},
        (e.event || '').replace(/^delivery\./, '') + ' · attempt ' + e.attempt,
        e.at ? [' · ', timeEl(e.at)] : '',
        [e.provider, e.error_class, e.status_code ? 'HTTP ' + e.status_code : '', typeof e.latency_ms === 'number' ? e.latency_ms.toFixed(0) + ' ms' : '',
          e.error, e.evidence, e.actor ? 'by ' + e.actor : ''].filter(Boolean).map((s) => ' · ' + s).join('')))));
  }

  // jobFilters is the replay job's selection for the DLQ filters on the page.
  function jobFilters(params) {
    const f = {};
    for (const k of ['channel', 'recipient', 'since', 'until', 'failure_class']) if (params.get(k)) f[k] = params.get(k);
    return f;
  }

  function bulkReplay(page, params) {
    const state = params.get('state') || '';
    const box = el('section', { class: 'panel', id: 'bulk', 'aria-labelledby': 'bulk-h' }, el('h2', { id: 'bulk-h', text: 'Replay the filtered set' }));
    if (state === 'unknown') {
      box.append(el('p', { text: 'A replay job takes the dead deliveries of the filters, and the unknown ones only with them. ' +
        'Filter on dead, or on dead and unknown, to replay in bulk; an unknown outcome is usually reconciled on its delivery\'s page.' }));
      return box;
    }
    const includeUnknown = el('input', { type: 'checkbox', id: 'bulk-include-unknown', name: 'include_unknown', disabled: state === 'dead' });
    const reason = el('textarea', { name: 'reason', required: true, maxlength: '500' });
    const actor = actorField('bulk-actor');
    const review = el('button', { type: 'submit', class: 'button', id: 'bulk-review', text: 'Count and review' });
    const out = el('div', { id: 'bulk-out', 'aria-live': 'polite' });
    const filters = jobFilters(params);
    const described = Object.entries(filters).map(([k, v]) => k + ' = ' + v).join(', ') || 'none (every dead delivery)';
    const form = el('form', { id: 'bulk-form', 'aria-describedby': 'bulk-scope' },
      el('p', { id: 'bulk-scope' }, 'Filters of the job: ', el('span', { class: 'mono', text: described }), '. ',
        'A durable job replays them in the background and resumes after a restart; a delivery that is no longer dead when its turn comes is skipped.'),
      el('div', { class: 'choice' }, includeUnknown, el('label', { for: 'bulk-include-unknown',
        text: 'Also replay the deliveries whose outcome is unknown (their recipient may have them already)' +
          (state === 'dead' ? ' — off: the list is filtered on dead' : '') })),
      field('bulk-reason', 'Reason', reason, 'Recorded in each replayed delivery\'s history (at most 500 characters).'),
      actor.field,
      el('div', { class: 'actions-row' }, review), out);
    box.append(form);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      if (!reason.value.trim()) { out.append(problemBox(new Error('Give a reason for the replay.'))); reason.focus(); return; }
      review.disabled = true;
      out.append(el('p', { class: 'muted', text: 'Counting…' }));
      let count;
      try {
        count = await countJob(filters, includeUnknown.checked, page.signal);
      } catch (err) {
        review.disabled = false;
        if (!page.gone) out.replaceChildren(problemBox(err));
        return;
      }
      if (page.gone) return;
      review.disabled = false;
      if (count.n === 0) {
        out.replaceChildren(el('p', { id: 'bulk-none', text: 'No delivery matches: nothing to replay.' }));
        return;
      }
      const body = withActor({ reason: reason.value.trim(), include_unknown: includeUnknown.checked, ...filters }, actor.input);
      // The key is made once per confirmation, so pressing Replay twice, or again after a network
      // failure, creates one job.
      const key = newKey();
      const n = fmtNumber(count.n);
      const go1 = el('button', { type: 'button', class: 'button button-danger', id: 'bulk-confirm', text: 'Replay ' + n + ' deliveries' });
      const cancel = el('button', { type: 'button', class: 'button button-secondary', id: 'bulk-cancel', text: 'Cancel' });
      const result = el('div', { 'aria-live': 'polite' });
      const confirm = el('div', { class: 'confirm', id: 'bulk-confirm-box', role: 'group', 'aria-labelledby': 'bulk-count' },
        el('p', {}, el('strong', { id: 'bulk-count', 'data-count': count.n, text: 'This will replay ' + n + ' deliveries.' })),
        el('p', { text: 'Counted by the server from the DLQ view just now, as the job selects them; ' +
          'the job selects again when it is created and replays what is still dead then.' }),
        el('div', { class: 'actions-row' }, go1, cancel), result);
      out.replaceChildren(confirm);
      go1.focus();
      cancel.addEventListener('click', () => { out.replaceChildren(); review.focus(); });
      go1.addEventListener('click', async () => {
        go1.disabled = true;
        cancel.disabled = true;
        result.replaceChildren();
        try {
          const job = await api('POST', '/v1/replays', { body, idempotencyKey: key, signal: page.signal });
          go('#/replays/' + encodeURIComponent(job.id));
        } catch (err) {
          go1.disabled = false;
          cancel.disabled = false;
          if (!page.gone) result.append(problemBox(err));
        }
      });
    });
    return box;
  }

  // countJob asks the server how many deliveries a job with these filters would match now (a
  // dry run of POST /v1/replays: the job's own selection, counted exactly, nothing created).
  async function countJob(filters, includeUnknown, signal) {
    const preview = await api('POST', '/v1/replays', { body: { dry_run: true, include_unknown: includeUnknown, ...filters }, signal });
    return { n: preview.matched };
  }

  function replayPage(id) {
    const page = newPage();
    const body = el('section', { class: 'panel', id: 'job', 'aria-live': 'polite' }, el('p', { class: 'muted', text: 'Loading…' }));
    const live = el('p', { class: 'live', id: 'live' });
    // The cancel action lives outside the part each poll redraws, so a click is never lost to a
    // refresh; it shows only while the job runs. The job stops at its next page: the poll then
    // sees it cancelled.
    const stop = el('button', { type: 'button', class: 'button button-danger', id: 'job-cancel', text: 'Cancel job', hidden: true });
    const stopped = el('div', { id: 'job-cancel-result', 'aria-live': 'polite' });
    const actions = el('div', { class: 'actions-row', id: 'job-actions' }, stop, stopped);
    stop.addEventListener('click', async () => {
      stop.disabled = true;
      stopped.replaceChildren();
      try {
        await api('POST', '/v1/replays/' + encodeURIComponent(id) + '/cancel', { signal: page.signal });
        if (!page.gone) stopped.append(el('p', { class: 'small', text: 'Cancelled: the job replays nothing after the page in hand.' }));
      } catch (err) {
        stop.disabled = false;
        if (!page.gone) stopped.append(problemBox(err));
      }
    });
    show('Replay job', el('p', {}, el('a', { href: '#/dlq', text: '← Dead-letter queue' }), ' · ', el('code', { text: id })), live, actions, body);
    page.every(POLL_MS, async () => {
      let job;
      try {
        job = await api('GET', '/v1/replays/' + encodeURIComponent(id), { signal: page.signal });
      } catch (err) {
        if (page.gone) return false;
        body.replaceChildren(problemBox(err));
        return !(err instanceof ApiError && err.status === 404);
      }
      if (page.gone) return false;
      const processed = (job.replayed || 0) + (job.skipped || 0);
      const skips = Object.entries(job.skips || {}).map(([why, n]) => el('tr', {}, el('td', { class: 'wrap', text: why }), el('td', { class: 'num', text: fmtNumber(n) })));
      const filters = Object.entries(job.filters || {}).map(([k, v]) => k + ' = ' + v).join(', ');
      body.replaceChildren(
        el('h2', {}, 'Progress ', el('span', { id: 'job-state', 'data-state': job.state }, badge(job.state))),
        el('label', { for: 'job-progress', class: 'small', text: fmtNumber(processed) + ' of ' + fmtNumber(job.matched) + ' handled' }),
        el('progress', { id: 'job-progress', max: Math.max(job.matched, 1), value: job.matched ? processed : (job.state === 'done' ? 1 : 0) }),
        facts([
          ['Matched', el('span', { id: 'job-matched', text: fmtNumber(job.matched) })],
          ['Replayed', el('span', { id: 'job-replayed', text: fmtNumber(job.replayed) })],
          ['Skipped', el('span', { id: 'job-skipped', text: fmtNumber(job.skipped) })],
          ['Reason', job.reason],
          ['Actor', el('span', { id: 'job-actor', text: job.actor || '' })],
          ['Unknown outcomes too', job.include_unknown ? 'yes' : 'no'],
          ['Filters', filters || 'none'],
          ['Created', timeEl(job.created_at)],
          ['Updated', timeEl(job.updated_at)],
          ['Finished', timeEl(job.finished_at)],
        ]),
        skips.length ? tableOf('Why deliveries were skipped', ['Reason', { label: 'Deliveries', num: true }], skips, { id: 'skips-table' }) : '');
      const running = job.state === 'running';
      stop.hidden = !running;
      live.textContent = running ? 'The job is running: refreshing every second.'
        : job.state === 'cancelled' ? 'The job was cancelled; the deliveries it had not reached stay dead.' : 'The job is done.';
      return running;
    });
  }

  // renderSuppressed explains a suppressed delivery from its delivery.suppressed event: the list
  // entry that stops it (with its evidence: the delivery whose provider answer added it, and the
  // provider's code) or the category its recipient opted out of.
  function renderSuppressed(box, d, events) {
    const e = d.state === 'suppressed' ? events.find((x) => x.type === 'delivery.suppressed') : null;
    if (!e) { box.replaceChildren(); return; }
    const s = e.data || {};
    const when = !s.from || s.from === 'accepted' ? 'at its accept, so it was never queued'
      : 'when attempt ' + s.attempt + ' was about to start (it was ' + s.from + ')';
    let why;
    let pairs;
    if (s.by === 'preference') {
      why = 'The recipient opted out of the category ' + s.category + ': the delivery was suppressed ' + when + ' and never sent.';
      pairs = [['Category', el('code', { id: 'suppressed-category', text: s.category })]];
    } else {
      const ev = s.evidence || {};
      why = 'The recipient is on the suppression list: the delivery was suppressed ' + when + ' and never sent.';
      const entry = suppressionLink(s.suppression_id);
      entry.id = 'suppressed-entry';
      let evidence = '';
      if (ev.delivery_id) {
        const link = deliveryLink(ev.delivery_id);
        link.id = 'suppressed-evidence';
        evidence = el('span', {}, link, ev.event_version ? ', event v' + ev.event_version : '');
      }
      pairs = [['Entry', entry], ['Source', s.source], ['Reason', s.reason], ['Evidence', evidence], ['Provider', ev.provider],
        ['Provider code', ev.provider_code ? el('code', { id: 'suppressed-code', text: ev.provider_code }) : ''], ['Added by', ev.actor]];
    }
    box.replaceChildren(el('section', { class: 'panel', id: 'suppression', 'data-by': s.by || '', 'aria-labelledby': 'suppression-h' },
      el('h2', { id: 'suppression-h', text: 'Why it was suppressed' }), el('p', { id: 'suppression-why', text: why }), facts(pairs)));
  }

  // ---------------------------------------------------------------------------------------
  // Suppression list.

  const SUPPRESSION_FILTERS = ['channel', 'recipient', 'include_removed', 'limit'];

  function suppressionLink(id, text) {
    return el('a', { href: '#/suppressions/' + encodeURIComponent(id), class: 'mono', text: text || id });
  }

  // entryBadge is an entry's state: in force, or removed (it suppresses nothing then).
  function entryBadge(s) {
    return s.removed_at ? el('span', { class: 'badge state-removed', text: 'removed' }) : el('span', { class: 'badge state-active', text: 'in force' });
  }

  // suppressionEvidence is why an entry is on the list: the provider's answer with a link to the
  // delivery whose event it is, or who added it.
  function suppressionEvidence(evidence) {
    const e = evidence || {};
    if (e.delivery_id) {
      const answer = [e.provider, e.provider_code ? 'code ' + e.provider_code : ''].filter(Boolean).join(' ');
      return el('span', { class: 'evidence' }, answer ? answer + ' · ' : '', deliveryLink(e.delivery_id),
        e.event_version ? ' v' + e.event_version : '');
    }
    return e.actor ? 'by ' + e.actor : '';
  }

  function suppressionsPage(params) {
    const page = newPage();
    const values = Object.fromEntries(SUPPRESSION_FILTERS.map((k) => [k, params.get(k) || '']));
    const channel = el('input', { name: 'channel', value: values.channel, autocomplete: 'off', placeholder: 'email' });
    const recipient = el('input', { name: 'recipient', value: values.recipient, autocomplete: 'off' });
    const removed = el('input', { type: 'checkbox', id: 'supp-filters-removed', name: 'include_removed', checked: values.include_removed === 'true' });
    const limit = select('limit', [['', '100'], ['500', '500'], ['1000', '1000']], values.limit);
    const search = el('form', { id: 'supp-filters', class: 'panel', 'aria-label': 'Search the suppression list' },
      el('h2', { text: 'Search' }),
      el('div', { class: 'form-grid' },
        field('supp-filters-channel', 'Channel', channel),
        field('supp-filters-recipient', 'Recipient', recipient, 'With a channel; matched in the channel\'s normal form'),
        field('supp-filters-limit', 'Per page', limit)),
      el('div', { class: 'choice' }, removed, el('label', { for: 'supp-filters-removed', text: 'Also list removed entries' })),
      el('div', { class: 'actions-row' },
        el('button', { type: 'submit', class: 'button', id: 'supp-search', text: 'Search' }),
        el('a', { class: 'button button-secondary', href: '#/suppressions', text: 'Clear' })));
    search.addEventListener('submit', (ev) => {
      ev.preventDefault();
      go('#/suppressions', { channel: channel.value.trim(), recipient: recipient.value.trim(),
        include_removed: removed.checked ? 'true' : '', limit: limit.value });
    });
    const results = el('section', { id: 'supp-results', 'aria-live': 'polite', 'aria-busy': 'true' }, el('p', { class: 'muted', text: 'Loading…' }));
    const load = async () => {
      results.setAttribute('aria-busy', 'true');
      try {
        const q = {};
        for (const k of [...SUPPRESSION_FILTERS, 'cursor']) if (params.get(k)) q[k] = params.get(k);
        const list = await api('GET', '/v1/suppressions' + query(q), { signal: page.signal });
        if (page.gone) return;
        const rows = list.items.map((s) => el('tr', { 'data-id': s.id, 'data-source': s.source, 'data-removed': s.removed_at ? 'true' : 'false' },
          el('td', {}, suppressionLink(s.id), el('div', {}, entryBadge(s))),
          el('td', { text: s.channel }),
          el('td', { class: 'wrap', text: s.recipient }),
          el('td', { text: s.source }),
          el('td', { class: 'wrap', text: s.reason || '' }),
          el('td', { class: 'wrap' }, suppressionEvidence(s.evidence)),
          el('td', {}, timeEl(s.created_at))));
        if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'muted', id: 'no-rows', text: 'No entry matches.' })));
        results.replaceChildren(
          tableOf('Suppression list, newest first', ['Entry', 'Channel', 'Recipient', 'Source', 'Reason', 'Evidence', 'Added'], rows, { id: 'suppressions-table' }),
          pager('#/suppressions', params, list.next_cursor, list.items.length));
      } catch (err) {
        if (!page.gone) results.replaceChildren(problemBox(err));
      }
      results.setAttribute('aria-busy', 'false');
    };
    show('Suppressions',
      el('p', { class: 'muted', text: 'A delivery to a recipient on this list is suppressed and never sent. Providers\' hard answers ' +
        '(no such mailbox, STOP, a blocked bot, 410 Gone) add entries with their evidence; you can add and remove them here.' }),
      search, results, addSuppressionForm(page, load));
    load();
  }

  function addSuppressionForm(page, added) {
    const channel = el('input', { name: 'channel', autocomplete: 'off', placeholder: 'email' });
    const recipient = el('input', { name: 'recipient', autocomplete: 'off' });
    const reason = el('textarea', { name: 'reason', maxlength: '500' });
    const actor = actorField('add-actor');
    const button = el('button', { type: 'submit', class: 'button', id: 'add-submit', text: 'Add to the list' });
    const out = el('div', { id: 'add-result', 'aria-live': 'polite' });
    const form = el('form', { class: 'panel', id: 'add-form', 'aria-labelledby': 'add-h', novalidate: true },
      el('h2', { id: 'add-h', text: 'Add a recipient' }),
      el('p', { text: 'From then on a delivery to the recipient is suppressed: at its accept, or at the start of its next attempt for one accepted before.' }),
      el('div', { class: 'form-grid' }, field('add-channel', 'Channel', channel), field('add-recipient', 'Recipient', recipient)),
      field('add-reason', 'Reason', reason, 'Optional; recorded on the entry (at most 500 characters).'),
      actor.field,
      el('div', { class: 'actions-row' }, button), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      if (!channel.value.trim() || !recipient.value.trim()) {
        out.append(problemBox(new Error('Give the channel and the recipient.')));
        (channel.value.trim() ? recipient : channel).focus();
        return;
      }
      const body = { channel: channel.value.trim(), recipient: recipient.value.trim() };
      if (oneLine(reason.value)) body.reason = oneLine(reason.value);
      button.disabled = true;
      try {
        // A recipient already on the list answers 200 with its entry: a double submit adds one.
        const { status, data } = await api('POST', '/v1/suppressions', { body: withActor(body, actor.input), signal: page.signal, withStatus: true });
        button.disabled = false;
        if (page.gone) return;
        out.append(el('div', { class: 'notice', role: 'status', id: 'add-done' },
          status === 201 ? 'Added: ' : 'Already on the list, unchanged: ', suppressionLink(data.id), '.'));
        recipient.value = '';
        reason.value = '';
        added();
      } catch (err) {
        button.disabled = false;
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  function suppressionPage(id) {
    const page = newPage();
    const heading = () => el('h2', { id: 'entry-h', text: 'Entry' });
    const body = el('section', { class: 'panel', id: 'entry', 'aria-labelledby': 'entry-h' }, heading(), el('p', { class: 'muted', text: 'Loading…' }));
    const actions = el('div', { id: 'entry-actions' });
    show('Suppression', el('p', {}, el('a', { href: '#/suppressions', text: '← Suppressions' }), ' · ', el('code', { text: id })), body, actions);
    const render = (s) => {
      const ev = s.evidence || {};
      let evidence = '';
      if (ev.delivery_id) {
        const link = deliveryLink(ev.delivery_id);
        link.id = 'entry-evidence';
        evidence = el('span', {}, link, ev.event_version ? ', event v' + ev.event_version : '');
      }
      body.replaceChildren(heading(), facts([
        ['State', el('span', { id: 'entry-state', 'data-state': s.removed_at ? 'removed' : 'active' }, entryBadge(s))],
        ['Channel', s.channel],
        ['Recipient', s.recipient],
        ['Source', el('span', { id: 'entry-source', text: s.source })],
        ['Reason', s.reason],
        ['Evidence', evidence],
        ['Provider', ev.provider],
        ['Provider code', ev.provider_code ? el('code', { text: ev.provider_code }) : ''],
        ['Added by', ev.actor],
        ['Added', timeEl(s.created_at)],
        ['Removed', timeEl(s.removed_at)],
        ['Removed by', s.removed_by],
        ['Why removed', el('span', { id: 'entry-removed-reason', text: s.removed_reason || '' })],
      ]));
      actions.replaceChildren(s.removed_at ? '' : removeSuppressionForm(s, page, render));
    };
    (async () => {
      try {
        const s = await api('GET', '/v1/suppressions/' + encodeURIComponent(id), { signal: page.signal });
        if (!page.gone) render(s);
      } catch (err) {
        if (!page.gone) body.replaceChildren(heading(), problemBox(err));
      }
    })();
  }

  function removeSuppressionForm(s, page, removed) {
    const reason = el('textarea', { name: 'reason', required: true, maxlength: '500' });
    const actor = actorField('remove-actor');
    const button = el('button', { type: 'submit', class: 'button button-danger', id: 'remove-submit', text: 'Remove from the list' });
    const out = el('div', { 'aria-live': 'polite' });
    const form = el('form', { class: 'panel', id: 'remove-form', 'aria-labelledby': 'remove-h', novalidate: true },
      el('h2', { id: 'remove-h', text: 'Remove' }),
      el('p', { text: 'Deliveries to ' + s.recipient + ' are sent again from then on; those suppressed before stay suppressed. The entry and its history are kept.' }),
      field('remove-reason', 'Reason', reason, 'Recorded on the entry (at most 500 characters).'),
      actor.field,
      el('div', { class: 'actions-row' }, button), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      if (!oneLine(reason.value)) { out.append(problemBox(new Error('Give a reason for the removal.'))); reason.focus(); return; }
      button.disabled = true;
      try {
        // A repeat answers the removed entry again: a double submit is harmless.
        const entry = await api('DELETE', '/v1/suppressions/' + encodeURIComponent(s.id),
          { body: withActor({ reason: oneLine(reason.value) }, actor.input), signal: page.signal });
        if (!page.gone) removed(entry);
      } catch (err) {
        button.disabled = false;
        if (!page.gone) out.append(problemBox(err));
      }
    });
    return form;
  }

  // ---------------------------------------------------------------------------------------
  // Start.

  document.getElementById('sign-out').addEventListener('click', () => signOut('Signed out. The key is no longer kept in this tab.'));
  document.getElementById('skip-link').addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });
  window.addEventListener('hashchange', route);
  route();
})();
