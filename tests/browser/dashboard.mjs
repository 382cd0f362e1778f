// Drives the `flywheel serve` dashboard in headless Chromium and checks that it
// works end to end: the page loads without a JavaScript error, the charts named
// with --expect-chart fill and keep updating, the tables view lists and opens
// the tables named with --expect-table, and the lineage view draws the graph of
// --expect-lineage.
//
//   node tests/browser/dashboard.mjs --url http://127.0.0.1:PORT/ --screenshot OUT.png
//       [--expect-chart chart-throughput]... [--expect-table NAME]...
//       [--expect-lineage NODE] [--lineage-direction up|down] [--timeout-ms 60000]
//
// A chart "keeps updating" when, after it first shows points, it is redrawn and
// either shows more points or, once its time window is full, a newer point.
// Screenshots: OUT.png (live view), OUT-tables.png and OUT-lineage.png.
// Prints one JSON line with what it found; exits 0 when every check passes,
// 1 naming the failed check on stderr, 2 on bad arguments.
//
// playwright-core comes from bench/peers (npm install there); the browser is
// $CHROMIUM, else /usr/bin/chromium.
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../bench/peers/package.json', import.meta.url));

function usage(msg) {
  console.error('dashboard.mjs: ' + msg);
  console.error('usage: node tests/browser/dashboard.mjs --url URL --screenshot OUT.png [--expect-chart ID]... ' +
    '[--expect-table NAME]... [--expect-lineage NODE] [--lineage-direction up|down] [--timeout-ms MS]');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { url: null, screenshot: null, charts: [], tables: [], lineage: null, direction: 'up', timeoutMs: 60000 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(flag + ' needs a value');
      return argv[++i];
    };
    switch (flag) {
      case '--url': a.url = value(); break;
      case '--screenshot': a.screenshot = value(); break;
      case '--expect-chart': a.charts.push(value()); break;
      case '--expect-table': a.tables.push(value()); break;
      case '--expect-lineage': a.lineage = value(); break;
      case '--lineage-direction': a.direction = value(); break;
      case '--timeout-ms': a.timeoutMs = Number(value()); break;
      default: usage('unknown argument ' + JSON.stringify(flag));
    }
  }
  if (!a.url) usage('--url is required');
  if (!a.screenshot) usage('--screenshot is required');
  if (!(a.timeoutMs > 0)) usage('--timeout-ms must be a positive number');
  if (!['up', 'down'].includes(a.direction)) usage('--lineage-direction must be up or down');
  return a;
}

const args = parseArgs(process.argv.slice(2));
const base = args.screenshot.replace(/\.png$/i, '');
const shots = { live: args.screenshot, tables: base + '-tables.png', lineage: base + '-lineage.png' };
const summary = { url: args.url, ok: false, title: null, charts: {}, tables: {}, lineage: null, screenshots: [],
  page_errors: [], http_errors: [] };

class CheckFailed extends Error {}
function fail(check, detail) {
  throw new CheckFailed(check + ': ' + detail);
}

let browser = null;
let page = null;
// Errors from the page are collected as they happen and fail the run at the
// next check; the page must be free of them for the whole session.
function assertNoPageErrors(during) {
  if (summary.page_errors.length) fail('no page errors', summary.page_errors.join(' | ') + ' (seen ' + during + ')');
  if (summary.http_errors.length) fail('no failed requests', summary.http_errors.join(' | ') + ' (seen ' + during + ')');
}

async function waitFor(check, fn, arg, timeoutMs = args.timeoutMs) {
  try {
    return await page.waitForFunction(fn, arg, { timeout: timeoutMs, polling: 100 });
  } catch (e) {
    fail(check, 'not met within ' + timeoutMs + ' ms' + (e.name === 'TimeoutError' ? '' : ' (' + e.message.split('\n')[0] + ')'));
  }
}

async function readChart(id) {
  return page.evaluate((chartId) => {
    const e = document.getElementById(chartId);
    if (!e) return null;
    return { points: Number(e.dataset.points || 0), draws: Number(e.dataset.draws || 0),
      series: Number(e.dataset.series || 0), lastT: Number(e.dataset.lastT || 0) };
  }, id);
}

async function checkChart(id) {
  if (!(await readChart(id))) fail('chart ' + id, 'no element with that id');
  await waitFor('chart ' + id + ' has points', (chartId) => Number(document.getElementById(chartId).dataset.points) > 0, id);
  const first = await readChart(id);
  await waitFor('chart ' + id + ' updates live (redrawn with more or newer points)', ([chartId, f]) => {
    const d = document.getElementById(chartId).dataset;
    return Number(d.draws) > f.draws && (Number(d.points) > f.points || Number(d.lastT) > f.lastT);
  }, [id, first]);
  const later = await readChart(id);
  summary.charts[id] = { first, later };
}

async function showView(view) {
  await page.click('button[data-view="' + view + '"]');
  await waitFor('view ' + view + ' is shown', (v) => {
    const p = document.querySelector('[data-view-panel="' + v + '"]');
    return p && !p.hidden;
  }, view, 10000);
}

async function checkTable(name) {
  await waitFor('table ' + JSON.stringify(name) + ' is listed in #tables-list', (n) =>
    [...document.querySelectorAll('#tables-list [data-table]')].some((e) => e.getAttribute('data-table') === n), name);
  const row = await page.evaluateHandle((n) =>
    [...document.querySelectorAll('#tables-list [data-table]')].find((e) => e.getAttribute('data-table') === n), name);
  await row.asElement().click();
  await waitFor('table ' + JSON.stringify(name) + ' shows its schema and versions', (n) => {
    const d = document.getElementById('table-detail');
    if (document.getElementById('table-error')) return true; // reported below
    return d && d.getAttribute('data-table') === n &&
      document.querySelectorAll('#table-schema tr').length > 0 &&
      document.querySelectorAll('#table-versions [data-version]').length > 0;
  }, name);
  const found = await page.evaluate(() => ({
    error: document.getElementById('table-error')?.textContent ?? null,
    columns: document.querySelectorAll('#table-schema tr').length,
    versions: [...document.querySelectorAll('#table-versions [data-version]')].map((e) => e.getAttribute('data-version')),
    text: document.getElementById('table-detail')?.innerText ?? '',
  }));
  if (found.error !== null) fail('table ' + JSON.stringify(name) + ' opens', found.error);
  // A missing value must not be printed as JavaScript's placeholder words.
  const stray = found.text.match(/\b(null|undefined|NaN|\[object Object\])\b/);
  if (stray) fail('table ' + JSON.stringify(name) + ' detail has no stray "' + stray[1] + '"', found.text.slice(0, 300));
  delete found.text;
  summary.tables[name] = found;
}

async function checkLineage(node) {
  await waitFor('lineage form is enabled (the server has a catalog)', () => {
    const e = document.getElementById('lineage-error');
    return !document.getElementById('lineage-node').disabled || (e && !e.hidden && e.textContent);
  }, null);
  if (await page.isDisabled('#lineage-node')) {
    fail('lineage form is enabled (the server has a catalog)', await page.textContent('#lineage-error'));
  }
  await page.fill('#lineage-node', node);
  await page.selectOption('#lineage-direction', args.direction);
  await page.click('#lineage-go');
  await waitFor('lineage of ' + JSON.stringify(node) + ' draws at least 2 nodes', () => {
    const e = document.getElementById('lineage-error');
    return (e && !e.hidden && e.textContent) || document.querySelectorAll('#lineage-graph .node').length >= 2;
  }, null);
  const found = await page.evaluate(() => {
    const e = document.getElementById('lineage-error');
    return { error: e && !e.hidden ? e.textContent : null,
      nodes: [...document.querySelectorAll('#lineage-graph .node')].map((n) => n.getAttribute('data-id')),
      edges: document.querySelectorAll('#lineage-graph .edge').length };
  });
  summary.lineage = Object.assign({ node, direction: args.direction }, found);
  if (found.error !== null) fail('lineage of ' + JSON.stringify(node), found.error);
}

async function screenshot(view) {
  await page.screenshot({ path: shots[view], fullPage: true });
  summary.screenshots.push(shots[view]);
}

async function main() {
  const { chromium } = require('playwright-core');
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.on('pageerror', (e) => summary.page_errors.push('uncaught ' + (e.stack || e.message).split('\n')[0]));
  page.on('console', (m) => {
    // Chromium logs every 4xx answer as "Failed to load resource"; those are
    // judged by the response handler below, which knows which are expected.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) summary.page_errors.push('console: ' + m.text());
  });
  page.on('response', (r) => {
    const path = new URL(r.url()).pathname;
    // The API answers 404 for an unknown table or node and without a catalog;
    // the page shows those. Anything else that fails is a bug.
    if (r.status() >= 500 || (r.status() >= 400 && !path.startsWith('/api/'))) summary.http_errors.push(r.status() + ' ' + path);
  });
  page.on('requestfailed', (r) => {
    const why = r.failure()?.errorText || 'failed';
    if (!why.includes('ERR_ABORTED')) summary.http_errors.push(why + ' ' + new URL(r.url()).pathname);
  });

  try {
    await page.goto(args.url, { waitUntil: 'load', timeout: args.timeoutMs });
  } catch (e) {
    fail('page loads', e.message.split('\n')[0]);
  }
  summary.title = await page.title();
  if (!/flywheel/i.test(summary.title)) fail('page loads', 'title ' + JSON.stringify(summary.title) + ' does not name flywheel');
  try {
    await Promise.all(args.charts.map(checkChart));
  } finally {
    await screenshot('live').catch(() => {});
  }
  assertNoPageErrors('on the live view');

  await showView('tables');
  try {
    for (const t of args.tables) await checkTable(t);
  } finally {
    await screenshot('tables').catch(() => {});
  }
  assertNoPageErrors('on the tables view');

  await showView('lineage');
  try {
    if (args.lineage !== null) await checkLineage(args.lineage);
  } finally {
    await screenshot('lineage').catch(() => {});
  }
  assertNoPageErrors('on the lineage view');
  summary.ok = true;
}

// The whole run is bounded, so a stuck browser cannot hang a test suite.
const overallMs = args.timeoutMs * (2 + args.tables.length + (args.lineage !== null ? 1 : 0)) + 30000;
let exitCode = 1;
let overallTimer;
try {
  await Promise.race([
    main(),
    new Promise((_, reject) => {
      overallTimer = setTimeout(() => reject(new CheckFailed('overall timeout: the run took more than ' + overallMs + ' ms')), overallMs);
    }),
  ]);
  exitCode = 0;
} catch (e) {
  summary.error = e instanceof CheckFailed ? e.message : 'unexpected error: ' + (e.stack || e.message);
  console.error('dashboard.mjs: FAILED ' + summary.error);
} finally {
  clearTimeout(overallTimer);
  if (browser) await Promise.race([browser.close().catch(() => {}), new Promise((r) => setTimeout(r, 10000))]);
  console.log(JSON.stringify(summary));
}
process.exit(exitCode);
