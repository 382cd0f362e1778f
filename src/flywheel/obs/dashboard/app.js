// flywheel dashboard: live charts of the metrics `flywheel serve` scrapes, the
// warehouse's tables and the catalog's lineage. Talks only to /api/ on the
// server that served it. Every string from the API reaches the page through
// textContent or setAttribute, never through HTML parsing.
'use strict';
(() => {
  let KEEP_S = 900;            // history kept per series: the server's history_s (at most an hour)
  const FETCH_TIMEOUT_MS = 10000;
  const VIEWS = ['live', 'tables', 'lineage'];
  const PALETTE = ['#2459d6', '#e8590c', '#2b9a66', '#c2255c', '#7048e8', '#0c8599',
    '#b08900', '#5c6b80', '#d6336c', '#37b24d', '#1971c2', '#ae3ec9'];
  const STAGES = ['io', 'decode', 'transform', 'assemble', 'consumer_wait', 'idle'];
  const STAGE_COLORS = { io: '#2459d6', decode: '#7048e8', transform: '#0c8599', assemble: '#2b9a66',
    consumer_wait: '#e8590c', idle: '#adb5bd' };
  const THROUGHPUT = ['flywheel_loader_rows_total', 'flywheel_replay_inserts_total',
    'flywheel_replay_samples_total', 'flywheel_env_steps_total', 'flywheel_actor_env_steps_total',
    'flywheel_run_env_steps_total', 'flywheel_run_learner_updates_total',
    'flywheel_ingest_rows_total', 'flywheel_table_rows_written_total',
    'flywheel_lm_tokens_generated_total', 'flywheel_lm_tokens_trained_total'];
  // The stages of a language-model job (flywheel_lm_stage_seconds_total), in stacking order.
  const LM_STAGES = ['generate', 'reward', 'train', 'sync', 'eval', 'checkpoint', 'wait'];
  const LM_STAGE_COLORS = { generate: '#2459d6', reward: '#b08900', train: '#2b9a66', sync: '#7048e8',
    eval: '#0c8599', checkpoint: '#5c6b80', wait: '#adb5bd' };
  const FAMILY_NAMES = {
    flywheel_replay_insert_blocked_seconds_sum: 'insert blocked',
    flywheel_replay_sample_blocked_seconds_sum: 'sample blocked',
    flywheel_replay_blocked_callers: 'blocked callers',
    flywheel_replay_size: 'size',
    flywheel_lm_eval_accuracy: 'held-out accuracy',
    flywheel_lm_tokens_generated_total: 'LM tokens generated',
    flywheel_lm_tokens_trained_total: 'LM tokens trained',
  };

  const S = {
    status: null, statusAt: -Infinity, interval: 1, now: 0, series: new Map(),
    window: 300, view: 'live', failingSince: null, charts: [],
    tablesSig: null, selectedTable: null, tableToken: 0, tablesTimer: null,
    lineageReady: false, lineageToken: 0,
  };

  // ---- DOM helpers -------------------------------------------------------

  const $ = (sel, root = document) => root.querySelector(sel);

  // el('td', {class: 'num', title: 'x', data: {version: 3}}, child, 'text', ...)
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    setProps(e, props);
    for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function svg(tag, props, ...kids) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    setProps(e, props);
    for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function setProps(e, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v == null || v === false) continue;
      if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.setAttribute('data-' + dk, String(dv));
      else if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, String(v));
    }
  }

  // ---- formatting --------------------------------------------------------

  function suffixFor(ref) {
    const a = Math.abs(ref);
    return a >= 1e12 ? [1e12, 'T'] : a >= 1e9 ? [1e9, 'G'] : a >= 1e6 ? [1e6, 'M'] : a >= 1e3 ? [1e3, 'K'] : [1, ''];
  }
  // A value in 3 significant digits with K/M/G/T.
  function human(v) {
    if (!Number.isFinite(v)) return '–';
    if (v === 0) return '0';
    const [d, s] = suffixFor(v);
    const x = v / d, a = Math.abs(x);
    return String(+(a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : x.toPrecision(3))) + s;
  }
  // An axis tick: as many decimals as the step needs, one suffix for the axis.
  function tickText(v, step, ref) {
    if (Math.abs(v) < step * 1e-9) return '0';
    const [d, s] = suffixFor(ref);
    let dec = 0;
    while (dec < 8 && Math.abs(Math.round(step / d * 10 ** dec) - step / d * 10 ** dec) > 1e-6) dec++;
    return (v / d).toFixed(dec) + s;
  }
  function fmtBytes(b) {
    if (!Number.isFinite(b)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let x = b, i = 0;
    while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return (i === 0 ? String(Math.round(x)) : x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2)) + ' ' + units[i];
  }
  const grouped = new Intl.NumberFormat('en-US');
  const fmtInt = (n) => (Number.isFinite(n) ? grouped.format(n) : '–');
  const pad2 = (n) => String(n).padStart(2, '0');
  function fmtClock(t, secs = true) {
    const d = new Date(t * 1000);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + (secs ? ':' + pad2(d.getSeconds()) : '');
  }
  function fmtDateTime(t) {
    if (!Number.isFinite(t) || t <= 0) return '–';
    const d = new Date(t * 1000);
    return d.getFullYear() + '-' + pad2(d.getMonth() + 1) + '-' + pad2(d.getDate()) + ' ' + fmtClock(t);
  }
  function fmtDuration(s) {
    if (!Number.isFinite(s) || s < 0) return '–';
    if (s < 60) return Math.round(s) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }
  function fmtAgo(t) {
    if (!Number.isFinite(t) || t <= 0) return 'never';
    const s = serverNow() - t;
    if (s < 1.5) return 'just now';
    if (s < 60) return Math.round(s) + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    if (s < 86400) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' d ago';
  }
  const serverNow = () => S.now || Date.now() / 1000;
  function shortTarget(url) {
    if (url === 'self') return 'self';
    try { return new URL(url).host || url; } catch (e) { return url; }
  }
  function familyName(name) {
    return FAMILY_NAMES[name] || name.replace(/^flywheel_/, '').replace(/_total$/, '').replace(/_/g, ' ');
  }
  const labelPairs = (labels) => Object.keys(labels || {}).sort().map((k) => k + '=' + labels[k]);
  const labelsKey = (labels) => labelPairs(labels).join('\u0000');

  // ---- API ---------------------------------------------------------------

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }
  async function api(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    let r;
    try {
      r = await fetch(path, { cache: 'no-store', signal: ctl.signal });
    } catch (e) {
      throw new ApiError(e.name === 'AbortError' ? 'no answer within ' + FETCH_TIMEOUT_MS / 1000 + ' s' : 'connection failed', 0);
    } finally {
      clearTimeout(timer);
    }
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new ApiError((body && typeof body.error === 'string' && body.error) || 'HTTP ' + r.status, r.status);
    if (body === null || typeof body !== 'object') throw new ApiError('the answer to ' + path + ' is not JSON', r.status);
    return body;
  }

  function setBanner(err) {
    const b = $('#error');
    if (!err) {
      S.failingSince = null;
      b.hidden = true;
      return;
    }
    if (S.failingSince == null) S.failingSince = Date.now() / 1000;
    const what = err.status ? 'The flywheel server answered ' + err.status + ': ' + err.message
      : 'Cannot reach the flywheel server at ' + location.host + ' (' + err.message + ')';
    b.textContent = what + '. Retrying every ' + Math.max(1, S.interval) + ' s since ' + fmtClock(S.failingSince) + '…';
    b.hidden = false;
  }

  // ---- live data ---------------------------------------------------------

  async function loadStatus() {
    const st = await api('/api/status');
    const prev = S.status;
    if (prev && (prev.pid !== st.pid || prev.started_unix !== st.started_unix)) {
      S.series.clear(); // the server restarted: series ids start over
      S.now = 0;
    }
    S.status = st;
    S.statusAt = performance.now();
    const hs = Number(st.history_s);
    if (Number.isFinite(hs) && hs > 0) KEEP_S = Math.min(3600, hs);
    const iv = Number(st.interval_s);
    S.interval = Number.isFinite(iv) && iv > 0 ? Math.max(0.25, iv) : 1;
    renderMeta();
    renderTargets();
  }

  function merge(resp) {
    let maxT = 0;
    for (const s of resp.series || []) {
      if (s == null || s.id == null) continue;
      let cur = S.series.get(s.id);
      if (!cur) {
        cur = { id: s.id, target: String(s.target ?? ''), name: String(s.name ?? ''), type: s.type,
          labels: s.labels || {}, points: [] };
        S.series.set(s.id, cur);
      }
      let last = cur.points.length ? cur.points[cur.points.length - 1][0] : -Infinity;
      for (const p of s.points || []) {
        const t = Number(p[0]);
        if (!(t > last)) continue; // overlap with what we already hold
        cur.points.push([t, p[1] == null ? NaN : Number(p[1])]);
        last = t;
        if (t > maxT) maxT = t;
      }
    }
    const now = Number(resp.now);
    S.now = Number.isFinite(now) && now > 0 ? now : Math.max(S.now, maxT);
    const cutoff = S.now - KEEP_S;
    for (const [id, s] of S.series) {
      let i = 0;
      while (i < s.points.length && s.points[i][0] < cutoff) i++;
      if (i) s.points.splice(0, i);
      if (!s.points.length) S.series.delete(id);
    }
  }

  async function tickLive() {
    try {
      if (!S.status || performance.now() - S.statusAt >= Math.max(2000, S.interval * 1000)) await loadStatus();
      // Ask for a little overlap: a point scraped just before the last `now`
      // may have been stored after it. merge() drops the duplicates.
      const since = S.now > 0 ? Math.max(0, S.now - 2 * S.interval) : 0;
      const r = await api('/api/series?since=' + since);
      merge(r);
      setBanner(null);
      if (S.view === 'live' && !document.hidden) drawAll();
    } catch (e) {
      setBanner(e);
    }
    setTimeout(tickLive, Math.max(250, S.interval * 1000));
  }

  function renderMeta() {
    const st = S.status, m = $('#server-meta');
    const item = (label, value, title) => el('span', { title }, label ? label + ' ' : '', el('b', null, value));
    m.replaceChildren(
      item('', st.version || 'flywheel'),
      item('pid', st.pid ?? '–'),
      item('up', fmtDuration(serverNow() - Number(st.started_unix)), 'started ' + fmtDateTime(Number(st.started_unix))),
      item('scrape every', S.interval + ' s'),
      item('warehouse', st.warehouse ? shortPath(st.warehouse) : 'none', st.warehouse || 'no warehouse'),
      item('catalog', st.catalog ? 'yes' : 'no'));
  }
  function shortPath(p) {
    p = String(p);
    return p.length > 40 ? '…' + p.slice(-39) : p;
  }

  function renderTargets() {
    const box = $('#targets');
    const targets = (S.status && S.status.targets) || [];
    if (!targets.length) {
      box.replaceChildren(el('span', { class: 'muted' }, 'No scrape targets.'));
      return;
    }
    box.replaceChildren(...targets.map((t) => {
      const url = String(t.url ?? '');
      const up = !!t.up;
      const sub = (Number(t.series) || 0) + ' series · ' + (t.last_scrape_unix ? fmtAgo(Number(t.last_scrape_unix)) : 'not scraped yet');
      const node = el('div', { class: 'target' + (up ? '' : ' down'), data: { target: url, up: up ? 1 : 0 },
        title: url + (t.last_error ? '\n' + t.last_error : '') },
      el('span', { class: 'dot' }), el('span', { class: 'url' }, url === 'self' ? 'self (this server)' : url),
      el('span', { class: 'sub' }, up ? sub : 'down'));
      if (t.last_error) node.append(el('span', { class: 'err' }, String(t.last_error)));
      return node;
    }));
  }

  // ---- chart data --------------------------------------------------------

  function seriesNamed(names) {
    const order = new Map(names.map((n, i) => [n, i]));
    return [...S.series.values()].filter((s) => order.has(s.name)).sort((a, b) =>
      order.get(a.name) - order.get(b.name) || labelsKey(a.labels).localeCompare(labelsKey(b.labels)) ||
      a.target.localeCompare(b.target));
  }
  // Per-second rate of a cumulative value; a drop is a restart, so that
  // interval is skipped.
  function rate(points, scale = 1) {
    const out = [];
    for (let i = 1; i < points.length; i++) {
      const [t0, v0] = points[i - 1], [t1, v1] = points[i];
      const dt = t1 - t0, dv = v1 - v0;
      if (!(dt > 0) || !(dv >= 0)) continue;
      out.push([t1, (dv / dt) * scale]);
    }
    return out;
  }
  const seriesLine = (s, points, extra) => Object.assign({ key: s.target + '\u0001' + s.name + '\u0001' + labelsKey(s.labels),
    family: s.name, target: s.target, labels: s.labels, points }, extra);

  const DEFS = {
    'chart-throughput': () => ({
      lines: seriesNamed(THROUGHPUT).map((s) => seriesLine(s, rate(s.points))),
      left: { unit: '/s' },
    }),
    'chart-returns': () => ({
      lines: seriesNamed(['flywheel_run_mean_return']).map((s) => seriesLine(s, s.points)),
      left: { zero: false },
    }),
    'chart-replay-fill': () => {
      const maxes = new Map(seriesNamed(['flywheel_replay_max_size']).map((s) => [s.target + '\u0001' + labelsKey(s.labels), s]));
      const lines = seriesNamed(['flywheel_replay_size']).map((s) => {
        const max = maxes.get(s.target + '\u0001' + labelsKey(s.labels));
        if (!max) return seriesLine(s, s.points, { axis: 'right', dash: true });
        const pts = [], mp = max.points, tol = S.interval / 2;
        let j = 0;
        for (const [t, v] of s.points) {
          while (j + 1 < mp.length && mp[j + 1][0] <= t + tol) j++;
          const m = mp[j] && mp[j][1];
          if (m > 0) pts.push([t, (100 * v) / m]);
        }
        return seriesLine(s, pts, { family: 'fill' });
      });
      return { lines, left: { kind: 'pct', max100: true }, right: { unit: ' items', integer: true } };
    },
    'chart-rate-limiter': () => ({
      // Seconds blocked per second (waits in progress included); older
      // servers only have the histograms' sums (finished waits).
      lines: (seriesNamed(['flywheel_replay_blocked_seconds_total']).length
        ? seriesNamed(['flywheel_replay_blocked_seconds_total'])
        : seriesNamed(['flywheel_replay_insert_blocked_seconds_sum', 'flywheel_replay_sample_blocked_seconds_sum']))
        .map((s) => seriesLine(s, rate(s.points, 100)))
        .concat(seriesNamed(['flywheel_replay_blocked_callers']).map((s) => seriesLine(s, s.points, { axis: 'right', dash: true }))),
      left: { kind: 'pct' }, right: { unit: ' callers', integer: true },
    }),
    'chart-loader-stalls': loaderStages,
    'chart-lm-quality': () => ({
      lines: seriesNamed(['flywheel_lm_eval_accuracy', 'flywheel_lm_update'])
        .filter((s) => s.name !== 'flywheel_lm_update' || s.labels.stat === 'reward_mean')
        .map((s) => seriesLine(s, s.points, s.name === 'flywheel_lm_update' ? { dash: true } : {})),
      left: {},
    }),
    'chart-lm-stages': lmStages,
    'chart-policy-lag': () => ({
      lines: seriesNamed(['flywheel_run_policy_lag']).sort((a, b) => quantileRank(a) - quantileRank(b))
        .map((s) => seriesLine(s, s.points)),
      left: { integer: true, unit: ' versions' },
    }),
  };
  function quantileRank(s) {
    const q = s.labels && (s.labels.stat ?? s.labels.quantile);
    return q === 'median' ? 0.5 : q === 'max' ? 2 : Number.isFinite(Number(q)) ? Number(q) : 3;
  }

  // Seconds per second in each stage, per loader of a table (the series sum
  // over the table's loaders: divided by flywheel_loader_instances), summed
  // over tables and aligned on the scrape grid so the layers can be stacked.
  function loaderStages() {
    const src = seriesNamed(['flywheel_loader_stage_seconds_total']);
    const instances = new Map();
    for (const s of seriesNamed(['flywheel_loader_instances'])) {
      instances.set(s.target + '\u0001' + String(s.labels.table ?? ''), s.points);
    }
    // The number of loaders alive at time t (the last value at or before t; at least 1).
    const loadersAt = (points, t) => {
      let n = 1;
      if (points) for (const [pt, v] of points) { if (pt > t + S.interval / 2) break; if (v >= 1) n = v; else n = 1; }
      return n;
    };
    const byStage = new Map(), loaders = new Set(), buckets = new Set();
    for (const s of src) {
      const stage = String(s.labels.stage ?? '');
      loaders.add(s.target + '\u0001' + labelsKey(Object.assign({}, s.labels, { stage: '' })));
      if (!byStage.has(stage)) byStage.set(stage, new Map());
      const m = byStage.get(stage);
      const inst = instances.get(s.target + '\u0001' + String(s.labels.table ?? ''));
      for (const [t, total] of rate(s.points, 100)) {
        const v = total / loadersAt(inst, t);
        const b = Math.round(t / S.interval);
        buckets.add(b);
        const cur = m.get(b);
        m.set(b, cur ? [Math.max(cur[0], t), cur[1] + v] : [t, v]);
      }
    }
    const times = [...buckets].sort((a, b) => a - b);
    const stages = [...byStage.keys()].sort((a, b) => stageRank(a) - stageRank(b) || a.localeCompare(b));
    const tOf = new Map();
    for (const m of byStage.values()) for (const [b, [t]] of m) tOf.set(b, Math.max(tOf.get(b) || 0, t));
    const lines = stages.map((stage) => {
      const m = byStage.get(stage);
      let last = 0;
      const pts = times.map((b) => {
        if (m.has(b)) last = m.get(b)[1];
        return [tOf.get(b), last];
      });
      return { key: 'stage\u0001' + stage, label: stage || '(no stage)', color: STAGE_COLORS[stage], points: pts };
    });
    const note = loaders.size > 1 ? 'sum over ' + loaders.size + ' tables\' loaders' : null;
    return { lines, stacked: true, left: { kind: 'pct' }, note };
  }
  // Share of a language-model job's wall time per stage, aligned on the
  // scrape grid (summed over jobs) so the layers can be stacked.
  function lmStages() {
    const byStage = new Map(), when = new Map();
    for (const s of seriesNamed(['flywheel_lm_stage_seconds_total'])) {
      const stage = String(s.labels.stage ?? '');
      if (!byStage.has(stage)) byStage.set(stage, new Map());
      const m = byStage.get(stage);
      for (const [t, v] of rate(s.points, 100)) {
        const b = Math.round(t / S.interval);
        m.set(b, (m.get(b) || 0) + v);
        when.set(b, Math.max(when.get(b) || 0, t));
      }
    }
    const buckets = [...when.keys()].sort((a, b) => a - b);
    const rank = (x) => { const i = LM_STAGES.indexOf(x); return i < 0 ? LM_STAGES.length : i; };
    const lines = [...byStage.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b)).map((stage) => ({
      key: 'lm\u0001' + stage, label: stage, color: LM_STAGE_COLORS[stage],
      points: buckets.map((b) => [when.get(b), byStage.get(stage).get(b) || 0]) }));
    return { lines, stacked: true, left: { kind: 'pct' } };
  }
  function stageRank(s) {
    const i = STAGES.indexOf(s);
    return i < 0 ? STAGES.length : i;
  }

  // Gives each line a label: the family (when the chart mixes families), the
  // labels that differ between lines and the target (when there are several).
  // Labels shared by every line become one note in the legend.
  function labelLines(lines) {
    const fams = new Set(lines.map((l) => l.family)), targets = new Set(lines.map((l) => l.target));
    let common = [];
    if (lines.length > 1 && lines.every((l) => l.labels)) {
      common = labelPairs(lines[0].labels).filter((p) => lines.every((l) => labelPairs(l.labels).includes(p)));
    }
    for (const l of lines) {
      if (l.label) continue;
      const parts = [];
      if (fams.size > 1) parts.push(familyName(l.family));
      const pairs = labelPairs(l.labels).filter((p) => !common.includes(p));
      if (pairs.length) parts.push(pairs.join(', '));
      if (targets.size > 1) parts.push('@' + shortTarget(l.target));
      l.label = parts.length ? parts.join(' · ') : familyName(l.family);
    }
    return common.join(', ');
  }

  // ---- chart drawing -----------------------------------------------------

  function initCharts() {
    for (const sec of document.querySelectorAll('section.chart')) {
      const plot = $('.plot', sec);
      const xhair = el('div', { class: 'xhair', hidden: true });
      plot.append(xhair);
      const c = { id: sec.id, sec, canvas: $('canvas', sec), tip: $('.tip', sec), legend: $('.legend', sec), xhair,
        build: DEFS[sec.id], colors: new Map(), hidden: new Set(), draws: 0, legendSig: '', layout: null, mouseX: null };
      sec.dataset.points = '0';
      sec.dataset.series = '0';
      sec.dataset.draws = '0';
      plot.addEventListener('mousemove', (ev) => { c.mouseX = ev.offsetX; showTip(c); });
      plot.addEventListener('mouseleave', () => { c.mouseX = null; showTip(c); });
      S.charts.push(c);
    }
  }

  function drawAll() {
    for (const c of S.charts) draw(c);
  }

  function colorOf(c, line) {
    if (line.color) return line.color;
    if (!c.colors.has(line.key)) c.colors.set(line.key, PALETTE[c.colors.size % PALETTE.length]);
    return c.colors.get(line.key);
  }

  function updateLegend(c, lines, note) {
    const sig = JSON.stringify([note, lines.map((l) => [l.key, l.label, c.hidden.has(l.key)])]);
    if (sig === c.legendSig) return;
    c.legendSig = sig;
    const items = [];
    if (note) items.push(el('li', { class: 'muted', title: 'shared by every line' }, note));
    for (const l of lines) {
      const li = el('li', { title: l.label + ' (click to hide or show)', class: c.hidden.has(l.key) ? 'off' : null },
        el('span', { class: 'sw' }), l.label + (l.axis === 'right' ? ' (right)' : ''));
      li.firstChild.style.background = colorOf(c, l);
      li.addEventListener('click', () => {
        if (c.hidden.has(l.key)) c.hidden.delete(l.key); else c.hidden.add(l.key);
        draw(c);
      });
      items.push(li);
    }
    c.legend.replaceChildren(...items);
  }

  function niceScale(lo, hi, n, integer) {
    if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d * 0.5; hi += d * 0.5; }
    let step = (hi - lo) / n;
    const mag = 10 ** Math.floor(Math.log10(step)), f = step / mag;
    step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
    if (integer) step = Math.max(1, Math.round(step));
    const a = Math.floor(lo / step + 1e-9) * step, b = Math.ceil(hi / step - 1e-9) * step;
    const ticks = [];
    for (let v = a; v <= b + step * 1e-6; v += step) ticks.push(Math.round(v / step) * step);
    return { lo: a, hi: b, step, ticks };
  }

  function axisScale(lines, cfg, stacked) {
    let lo = Infinity, hi = -Infinity;
    for (const l of lines) for (const p of stacked ? l.top : l.pts) { if (p[1] < lo) lo = p[1]; if (p[1] > hi) hi = p[1]; }
    if (cfg.zero !== false) { lo = Math.min(lo, 0); }
    if (cfg.max100) hi = Math.max(hi, 100);
    const sc = niceScale(lo, hi, 4, cfg.integer);
    const ref = Math.max(Math.abs(sc.lo), Math.abs(sc.hi));
    sc.text = (v) => (cfg.kind === 'pct' ? tickText(v, sc.step, 1) + '%' : tickText(v, sc.step, ref));
    sc.value = (v) => (cfg.kind === 'pct' ? human(v) + '%' : human(v) + (cfg.unit || ''));
    return sc;
  }

  function timeStep(span, px) {
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
    const want = span / Math.max(2, px / 90);
    return steps.find((s) => s >= want) || steps[steps.length - 1];
  }

  function draw(c) {
    const spec = c.build();
    const note = [labelLines(spec.lines), spec.note].filter(Boolean).join(' · ');
    updateLegend(c, spec.lines, note || null);
    const cv = c.canvas, W = cv.clientWidth, H = cv.clientHeight;
    if (!W || !H) return; // not on screen; drawn when shown
    const dpr = window.devicePixelRatio || 1;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(H * dpr);
    }
    const ctx = cv.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
    // The window, shortened to the history there is (at least 30 s), so a
    // fresh dashboard does not squeeze its first points against the right edge.
    const t1 = serverNow();
    let first = Infinity;
    for (const l of spec.lines) if (l.points.length) first = Math.min(first, l.points[0][0]);
    const t0 = Math.max(t1 - S.window, Math.min(first, t1 - 30));

    const drawn = [];
    for (const l of spec.lines) {
      if (c.hidden.has(l.key)) continue;
      const pts = l.points.filter((p) => p[0] >= t0 && p[0] <= t1 + S.interval && Number.isFinite(p[1]));
      if (pts.length) drawn.push(Object.assign({}, l, { pts, color: colorOf(c, l), axis: l.axis || 'left' }));
    }
    if (spec.stacked) {
      let base = null;
      for (const l of drawn) {
        l.base = base || l.pts.map((p) => [p[0], 0]);
        l.top = l.pts.map((p, j) => [p[0], l.base[j][1] + p[1]]);
        base = l.top;
      }
    }
    let left = drawn.filter((l) => l.axis === 'left'), right = drawn.filter((l) => l.axis === 'right');
    let leftCfg = spec.left || {}, rightCfg = spec.right || {};
    if (!left.length && right.length) { left = right; right = []; leftCfg = rightCfg; for (const l of left) l.axis = 'left'; }

    let points = 0, lastT = 0;
    for (const l of drawn) { points += l.pts.length; lastT = Math.max(lastT, l.pts[l.pts.length - 1][0]); }
    c.draws++;
    Object.assign(c.sec.dataset, { points: String(points), series: String(drawn.length), draws: String(c.draws),
      lastT: String(lastT) });

    if (!drawn.length) {
      c.layout = null;
      ctx.fillStyle = '#8a93a5';
      ctx.font = '13px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText(spec.lines.length ? 'no points in this window' : 'no data yet', W / 2, H / 2);
      showTip(c);
      return;
    }

    const ls = axisScale(left, leftCfg, spec.stacked);
    const rs = right.length ? axisScale(right, rightCfg, false) : null;
    const widest = (sc) => Math.max(...sc.ticks.map((v) => ctx.measureText(sc.text(v)).width));
    const padL = Math.ceil(widest(ls)) + 12, padR = rs ? Math.ceil(widest(rs)) + 12 : 14, padT = 8, padB = 22;
    const x0 = padL, x1 = W - padR, y0 = padT, y1 = H - padB;
    const X = (t) => x0 + ((t - t0) / (t1 - t0)) * (x1 - x0);
    const Y = (sc) => (v) => y1 - ((v - sc.lo) / (sc.hi - sc.lo)) * (y1 - y0);
    const YL = Y(ls), YR = rs ? Y(rs) : null;

    // Grid and value ticks.
    ctx.lineWidth = 1;
    ctx.textBaseline = 'middle';
    for (const v of ls.ticks) {
      const y = Math.round(YL(v)) + 0.5;
      ctx.strokeStyle = v === 0 ? '#d5d9e1' : '#eef0f3';
      ctx.beginPath(); ctx.moveTo(x0, y); ctx.lineTo(x1, y); ctx.stroke();
      ctx.fillStyle = '#5d6678';
      ctx.textAlign = 'right';
      ctx.fillText(ls.text(v), x0 - 6, y);
    }
    if (rs) {
      ctx.textAlign = 'left';
      for (const v of rs.ticks) ctx.fillText(rs.text(v), x1 + 6, YR(v));
    }
    // Time ticks.
    const ts = timeStep(t1 - t0, x1 - x0);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (let t = Math.ceil(t0 / ts) * ts; t <= t1; t += ts) {
      const x = Math.round(X(t)) + 0.5;
      ctx.strokeStyle = '#f2f3f6';
      ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1); ctx.stroke();
      ctx.strokeStyle = '#c9ced8';
      ctx.beginPath(); ctx.moveTo(x, y1); ctx.lineTo(x, y1 + 4); ctx.stroke();
      if (x - x0 > 16 && x1 - x > 16) { ctx.fillStyle = '#5d6678'; ctx.fillText(fmtClock(t, ts < 60), x, y1 + 6); }
    }
    ctx.strokeStyle = '#c9ced8';
    ctx.beginPath(); ctx.moveTo(x0, y1 + 0.5); ctx.lineTo(x1, y1 + 0.5); ctx.stroke();

    // Lines (gaps where scrapes are missing).
    const gap = Math.max(2.5 * S.interval, 1);
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, y0 - 2, x1 - x0 + 2, y1 - y0 + 4); ctx.clip();
    ctx.lineJoin = 'round';
    for (const l of drawn) {
      const y = l.axis === 'right' ? YR : YL;
      const pts = spec.stacked ? l.top : l.pts;
      if (spec.stacked) {
        ctx.beginPath();
        pts.forEach((p, j) => (j ? ctx.lineTo(X(p[0]), y(p[1])) : ctx.moveTo(X(p[0]), y(p[1]))));
        for (let j = l.base.length - 1; j >= 0; j--) ctx.lineTo(X(l.base[j][0]), y(l.base[j][1]));
        ctx.closePath();
        ctx.globalAlpha = 0.55;
        ctx.fillStyle = l.color;
        ctx.fill();
        ctx.globalAlpha = 1;
      }
      ctx.strokeStyle = l.color;
      ctx.lineWidth = spec.stacked ? 1 : 1.6;
      ctx.setLineDash(l.dash ? [5, 3] : []);
      ctx.beginPath();
      let prev = -Infinity;
      for (const [t, v] of pts) {
        if (t - prev > gap) ctx.moveTo(X(t), y(v)); else ctx.lineTo(X(t), y(v));
        prev = t;
      }
      ctx.stroke();
      ctx.setLineDash([]);
      if (!spec.stacked) {
        const [t, v] = pts[pts.length - 1];
        ctx.fillStyle = l.color;
        ctx.beginPath(); ctx.arc(X(t), y(v), 2.4, 0, 2 * Math.PI); ctx.fill();
      }
    }
    ctx.restore();
    c.layout = { x0, x1, y0, y1, t0, t1, X, drawn, ls, rs, stacked: !!spec.stacked };
    showTip(c);
  }

  function nearest(pts, t) {
    let lo = 0, hi = pts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (pts[mid][0] < t) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && Math.abs(pts[lo - 1][0] - t) <= Math.abs(pts[lo][0] - t)) lo--;
    return lo;
  }

  function showTip(c) {
    const L = c.layout;
    if (c.mouseX == null || !L || c.mouseX < L.x0 || c.mouseX > L.x1) {
      c.tip.hidden = true;
      c.xhair.hidden = true;
      return;
    }
    const t = L.t0 + ((c.mouseX - L.x0) / (L.x1 - L.x0)) * (L.t1 - L.t0);
    const rows = [];
    let at = null;
    for (const l of L.drawn.slice().reverse()) {
      const j = nearest(l.pts, t);
      const p = l.pts[j];
      if (!p || Math.abs(p[0] - t) > Math.max(3 * S.interval, 2)) continue;
      if (at == null) at = p[0];
      const sc = l.axis === 'right' ? L.rs : L.ls;
      const sw = el('span', { class: 'sw' });
      sw.style.background = l.color;
      rows.push(el('div', null, sw, l.label + ': ', el('b', null, sc.value(p[1]))));
    }
    if (!rows.length) {
      c.tip.hidden = true;
      c.xhair.hidden = true;
      return;
    }
    if (!L.stacked) rows.reverse();
    c.tip.replaceChildren(el('div', { class: 't' }, fmtClock(at)), ...rows);
    c.tip.hidden = false;
    const x = L.X(at);
    Object.assign(c.xhair.style, { left: Math.round(x) + 'px', top: L.y0 + 'px', height: L.y1 - L.y0 + 'px' });
    c.xhair.hidden = false;
    const w = c.tip.offsetWidth, plotW = c.canvas.clientWidth;
    c.tip.style.left = (x + 14 + w > plotW ? Math.max(0, x - 14 - w) : x + 14) + 'px';
  }

  // ---- tables ------------------------------------------------------------

  async function loadTables(force) {
    const notice = $('#tables-empty');
    let r;
    try {
      r = await api('/api/tables');
    } catch (e) {
      notice.textContent = 'Could not list tables: ' + e.message;
      notice.hidden = false;
      return;
    }
    $('#tables-warehouse').textContent = r.warehouse ? String(r.warehouse) : 'none';
    const tables = Array.isArray(r.tables) ? r.tables : [];
    if (!r.warehouse) {
      notice.textContent = 'No warehouse is open: start flywheel serve with a warehouse directory to browse its tables.';
    } else if (!tables.length) {
      notice.textContent = 'The warehouse has no tables yet.';
    }
    notice.hidden = !!(r.warehouse && tables.length);
    $('#tables-split').hidden = !r.warehouse;
    const sig = JSON.stringify(tables);
    if (sig !== S.tablesSig || force) {
      S.tablesSig = sig;
      renderTableList(tables);
    }
    if (force && S.selectedTable != null) selectTable(S.selectedTable);
  }

  function renderTableList(tables) {
    const rows = tables.map((t) => {
      const name = String(t.name ?? '');
      const tr = el('tr', { data: { table: name }, class: name === S.selectedTable ? 'sel' : null, tabindex: 0 },
        el('td', null, name),
        el('td', { class: 'num' }, t.version ?? '–'),
        el('td', { class: 'num', title: fmtInt(Number(t.rows)) + ' rows' }, human(Number(t.rows))),
        el('td', { class: 'num', title: fmtInt(Number(t.bytes)) + ' bytes' }, fmtBytes(Number(t.bytes))),
        el('td', null, ...tagChips(t.tags)),
        el('td', { title: fmtDateTime(Number(t.updated_unix)), class: 'muted' }, fmtAgo(Number(t.updated_unix))));
      tr.addEventListener('click', () => selectTable(name));
      tr.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') selectTable(name); });
      return tr;
    });
    $('#tables-list').replaceChildren(...rows);
  }

  function tagChips(tags) {
    return (Array.isArray(tags) ? tags : []).map((g) => el('span', { class: 'chip' }, String(g)));
  }

  async function selectTable(name) {
    S.selectedTable = name;
    for (const tr of document.querySelectorAll('#tables-list tr')) tr.classList.toggle('sel', tr.getAttribute('data-table') === name);
    const token = ++S.tableToken;
    const box = $('#table-detail');
    let d;
    try {
      d = await api('/api/table?name=' + encodeURIComponent(name));
    } catch (e) {
      if (token !== S.tableToken) return;
      box.removeAttribute('data-table');
      box.replaceChildren(el('h3', null, name), el('p', { id: 'table-error', class: 'error-text' }, e.message));
      return;
    }
    if (token !== S.tableToken) return;
    const versions = Array.isArray(d.versions) ? d.versions : [];
    const schema = Array.isArray(d.schema) ? d.schema : [];
    const latest = versions[0] || {};
    const tagMap = d.tags && typeof d.tags === 'object' ? Object.entries(d.tags) : [];
    const facts = el('div', { class: 'facts' },
      el('span', null, 'version ', el('b', null, d.version ?? '–')),
      el('span', null, el('b', null, fmtInt(Number(latest.rows))), ' rows'),
      el('span', null, el('b', null, fmtBytes(Number(latest.bytes)))),
      el('span', null, el('b', null, fmtInt(Number(latest.fragments))), ' fragments'),
      el('span', null, versions.length + (versions.length === 1 ? ' version' : ' versions')));
    const tagsLine = tagMap.length
      ? el('div', { class: 'tags' }, ...tagMap.map(([g, v]) => el('span', { class: 'chip', title: 'tag ' + g + ' → version ' + v }, g + ' → v' + v)))
      : null;
    const schemaTable = el('table', { class: 'data' },
      el('thead', null, el('tr', null, el('th', null, 'Column'), el('th', null, 'Type'))),
      el('tbody', { id: 'table-schema' }, ...schema.map((f) =>
        el('tr', { data: { column: String(f.name ?? '') } }, el('td', null, String(f.name ?? '')), el('td', { class: 'type' }, String(f.type ?? ''))))));
    const versionsTable = el('table', { class: 'data' },
      el('thead', null, el('tr', null, ...['Version', 'Operation', 'Rows', 'Size', 'Fragments', 'Time', 'Tags'].map((h, i) =>
        el('th', { class: [0, 2, 3, 4].includes(i) ? 'num' : null }, h)))),
      el('tbody', { id: 'table-versions' }, ...versions.map((v) => el('tr', { data: { version: v.version ?? '' } },
        el('td', { class: 'num' }, v.version ?? '–'),
        el('td', null, String(v.op ?? '')),
        el('td', { class: 'num' }, fmtInt(Number(v.rows))),
        el('td', { class: 'num', title: fmtInt(Number(v.bytes)) + ' bytes' }, fmtBytes(Number(v.bytes))),
        el('td', { class: 'num' }, fmtInt(Number(v.fragments))),
        el('td', { class: 'muted nowrap', title: fmtAgo(Number(v.timestamp_unix)) }, fmtDateTime(Number(v.timestamp_unix))),
        el('td', null, ...tagChips(v.tags))))));
    box.setAttribute('data-table', name);
    // replaceChildren would turn a null into the text "null": leave those out.
    box.replaceChildren(...[el('h3', null, String(d.name ?? name)),
      d.uri ? el('div', { class: 'muted', title: 'location' }, String(d.uri)) : null, facts, tagsLine,
      el('h4', null, 'Schema · ' + schema.length + (schema.length === 1 ? ' column' : ' columns')),
      el('div', { class: 'scroll' }, schemaTable),
      el('h4', null, 'Versions · newest first'), el('div', { class: 'scroll' }, versionsTable)].filter((x) => x != null));
  }

  // ---- lineage -----------------------------------------------------------

  function setLineageError(msg) {
    const e = $('#lineage-error');
    e.textContent = msg || '';
    e.hidden = !msg;
  }
  function setLineageEnabled(on) {
    for (const id of ['#lineage-node', '#lineage-direction', '#lineage-go']) $(id).disabled = !on;
  }

  async function initLineage() {
    if (S.lineageReady) return;
    if (!S.status) { try { await loadStatus(); } catch (e) { /* the banner reports it */ } }
    if (S.status && S.status.catalog === false) {
      setLineageEnabled(false);
      setLineageError('No catalog: start flywheel serve with --catalog to browse lineage.');
      $('#lineage-graph').hidden = true;
      return;
    }
    try {
      const r = await api('/api/datasets');
      const list = $('#lineage-datasets');
      list.replaceChildren(...(r.datasets || []).map((d) =>
        el('option', { value: String(d.name ?? ''), label: 'latest v' + (d.latest_version ?? '?') })));
      S.lineageReady = true;
      setLineageEnabled(true);
      $('#lineage-graph').hidden = false;
      setLineageError(null);
    } catch (e) {
      if (e.status === 404) {
        setLineageEnabled(false);
        $('#lineage-graph').hidden = true;
        setLineageError(e.message);
      } else {
        setLineageError('Could not list datasets: ' + e.message);
      }
    }
  }

  async function runLineage(ev) {
    if (ev) ev.preventDefault();
    const node = $('#lineage-node').value.trim();
    const dir = $('#lineage-direction').value === 'down' ? 'down' : 'up';
    if (!node) { setLineageError('Enter a dataset name, name@version or artifact path.'); return; }
    const token = ++S.lineageToken;
    $('#lineage-summary').textContent = 'Loading…';
    let g;
    try {
      g = await api('/api/lineage?node=' + encodeURIComponent(node) + '&direction=' + dir);
    } catch (e) {
      if (token !== S.lineageToken) return;
      setLineageError(e.message);
      $('#lineage-summary').textContent = '';
      $('#lineage-graph').hidden = true;
      return;
    }
    if (token !== S.lineageToken) return;
    setLineageError(null);
    $('#lineage-graph').hidden = false;
    renderGraph(g, dir);
  }

  function renderGraph(g, dir) {
    const box = $('#lineage-graph');
    const nodes = (Array.isArray(g.nodes) ? g.nodes : []).map((n) => ({
      id: String(n.id ?? ''), kind: String(n.kind ?? ''), label: String(n.label ?? n.id ?? ''),
      depth: Math.max(0, Math.floor(Number(n.depth) || 0)) }));
    const byId = new Map(nodes.map((n) => [n.id, n]));
    const edges = (Array.isArray(g.edges) ? g.edges : []).map((e) => ({ from: String(e.from ?? ''), to: String(e.to ?? ''),
      label: String(e.label ?? '') })).filter((e) => byId.has(e.from) && byId.has(e.to));
    const root = String(g.root ?? '');
    $('#lineage-summary').textContent = nodes.length + (nodes.length === 1 ? ' node' : ' nodes') + ', ' + edges.length +
      (edges.length === 1 ? ' edge' : ' edges') + ' · ' + (dir === 'up' ? 'producers on the left' : 'consumers on the right') +
      (nodes.length <= 1 ? ' · nothing recorded ' + (dir === 'up' ? 'upstream' : 'downstream') : '');
    if (!nodes.length) {
      box.replaceChildren(el('div', { class: 'empty' }, 'No nodes.'));
      return;
    }
    const maxD = Math.max(...nodes.map((n) => n.depth));
    const colOf = (n) => (dir === 'up' ? maxD - n.depth : n.depth);
    const cols = Array.from({ length: maxD + 1 }, () => []);
    nodes.sort((a, b) => (b.id === root) - (a.id === root) || a.label.localeCompare(b.label));
    for (const n of nodes) cols[colOf(n)].push(n);
    // Order each column by where its neighbours nearer the root sit, so that
    // edges cross less.
    const adj = new Map(nodes.map((n) => [n.id, []]));
    for (const e of edges) { adj.get(e.from).push(e.to); adj.get(e.to).push(e.from); }
    const pos = new Map();
    for (let d = 0; d <= maxD; d++) {
      const col = cols[dir === 'up' ? maxD - d : d];
      const key = (n) => {
        const ps = adj.get(n.id).filter((m) => byId.get(m).depth === d - 1).map((m) => pos.get(m));
        return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : Infinity;
      };
      if (d > 0) col.sort((a, b) => key(a) - key(b));
      col.forEach((n, i) => pos.set(n.id, i));
    }
    const MAXC = 34;
    const shown = (s) => (s.length > MAXC ? s.slice(0, 12) + '…' + s.slice(-(MAXC - 13)) : s);
    const longest = Math.max(...nodes.map((n) => shown(n.label).length));
    const nodeW = Math.min(280, Math.max(140, longest * 7.3 + 24)), nodeH = 42, gapX = 96, gapY = 16, padding = 16;
    const tallest = Math.max(...cols.map((c) => c.length));
    const Wsvg = padding * 2 + cols.length * nodeW + (cols.length - 1) * gapX;
    const Hsvg = padding * 2 + tallest * nodeH + (tallest - 1) * gapY;
    const place = new Map();
    cols.forEach((col, ci) => {
      const off = ((tallest - col.length) * (nodeH + gapY)) / 2;
      col.forEach((n, i) => place.set(n.id, { x: padding + ci * (nodeW + gapX), y: padding + off + i * (nodeH + gapY), col: ci }));
    });
    const root_ = svg('svg', { width: Wsvg, height: Hsvg, viewBox: '0 0 ' + Wsvg + ' ' + Hsvg, role: 'img',
      'aria-label': 'lineage graph' });
    root_.append(svg('defs', null, svg('marker', { id: 'fw-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7,
      markerHeight: 7, orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#9aa3b5' }))));
    const edgeLayer = svg('g'), labelLayer = svg('g'), nodeLayer = svg('g');
    for (const e of edges) {
      const a = place.get(e.from), b = place.get(e.to);
      let x1, x2, bend;
      if (a.col < b.col) { x1 = a.x + nodeW; x2 = b.x; bend = (x2 - x1) / 2; }
      else if (a.col > b.col) { x1 = a.x; x2 = b.x + nodeW; bend = (x2 - x1) / 2; }
      else { x1 = a.x + nodeW; x2 = b.x + nodeW; bend = 40; }
      const y1 = a.y + nodeH / 2, y2 = b.y + nodeH / 2;
      const d = 'M' + x1 + ',' + y1 + ' C' + (x1 + bend) + ',' + y1 + ' ' + (a.col === b.col ? x2 + bend : x2 - bend) + ',' + y2 +
        ' ' + x2 + ',' + y2;
      edgeLayer.append(svg('path', { class: 'edge', d, 'marker-end': 'url(#fw-arrow)', data: { from: e.from, to: e.to } },
        svg('title', null, e.from + ' → ' + e.to + (e.label ? ' (' + e.label + ')' : ''))));
      if (e.label && edges.length <= 60) {
        labelLayer.append(svg('text', { class: 'elabel', x: (x1 + x2) / 2 + (a.col === b.col ? bend * 0.75 : 0), y: (y1 + y2) / 2 - 4,
          'text-anchor': 'middle', stroke: '#fff', 'stroke-width': 3, 'paint-order': 'stroke' }, e.label));
      }
    }
    for (const n of nodes) {
      const p = place.get(n.id);
      const query = n.kind === 'file' ? n.id  // file:PATH: the server parses the prefix
        : n.kind && n.id.startsWith(n.kind + ':') ? n.id.slice(n.kind.length + 1) : n.label;
      const linkable = n.id !== root && (n.kind === 'dataset' || n.kind === 'artifact' || n.kind === 'file');
      const gEl = svg('g', { class: 'node ' + n.kind + (n.id === root ? ' root' : '') + (linkable ? ' link' : ''),
        data: { id: n.id, kind: n.kind, depth: n.depth }, transform: 'translate(' + p.x + ',' + p.y + ')' },
      svg('title', null, n.label + '\n' + n.id + (linkable ? '\nclick to show its lineage' : '')),
      svg('rect', { width: nodeW, height: nodeH, rx: 6 }),
      svg('text', { class: 'kind', x: 10, y: 15 }, n.kind + (n.id === root ? ' · root' : '')),
      svg('text', { x: 10, y: 32 }, shown(n.label)));
      if (linkable) {
        gEl.addEventListener('click', () => {
          $('#lineage-node').value = query;
          runLineage(null);
        });
      }
      nodeLayer.append(gEl);
    }
    root_.append(edgeLayer, labelLayer, nodeLayer);
    box.replaceChildren(root_);
  }

  // ---- views -------------------------------------------------------------

  function showView(v) {
    if (!VIEWS.includes(v)) v = 'live';
    S.view = v;
    for (const p of document.querySelectorAll('[data-view-panel]')) p.hidden = p.getAttribute('data-view-panel') !== v;
    for (const b of document.querySelectorAll('.tab')) b.setAttribute('aria-selected', String(b.getAttribute('data-view') === v));
    clearInterval(S.tablesTimer);
    S.tablesTimer = null;
    if (v === 'live') drawAll();
    if (v === 'tables') {
      loadTables(false);
      S.tablesTimer = setInterval(() => loadTables(false), 10000);
    }
    if (v === 'lineage') initLineage();
  }

  function init() {
    initCharts();
    for (const b of document.querySelectorAll('.tab')) {
      b.addEventListener('click', () => {
        const v = b.getAttribute('data-view');
        if (location.hash.slice(1) === v) showView(v); else location.hash = v;
      });
    }
    window.addEventListener('hashchange', () => showView(location.hash.slice(1)));
    document.addEventListener('visibilitychange', () => { if (!document.hidden && S.view === 'live') drawAll(); });
    $('#window').addEventListener('change', (ev) => { S.window = Number(ev.target.value) || 300; drawAll(); });
    S.window = Number($('#window').value) || 300;
    $('#tables-refresh').addEventListener('click', () => loadTables(true));
    $('#lineage-form').addEventListener('submit', runLineage);
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { if (S.view === 'live') drawAll(); }, 150);
    });
    showView(location.hash.slice(1));
    tickLive();
  }

  init();
})();
