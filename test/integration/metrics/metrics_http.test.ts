import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import express from 'express';
import {
  createMetricsRegistry,
  MetricsRecorder,
  type MetricsWindow,
} from '../../../metrics/index.js';
import { metricsRouter } from '../../../server/app/metrics_http.js';
import { parsePrometheusText, sampleValue } from '../../support/prometheus_text.js';

const base = 1_700_000_000_000;
const clock = { ms: base + 1_000 };
const recorder = new MetricsRecorder({}, { now: () => clock.ms, editors: () => 3 });
const registry = createMetricsRegistry(recorder);
const logged: string[] = [];
// What the server does with each window: one JSON log line.
recorder.onWindow((window) => logged.push(JSON.stringify(window)));
let server: Server;
let origin: string;

before(async () => {
  const app = express();
  app.use(metricsRouter(recorder, registry));
  server = createServer(app).listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.close();
  await once(server, 'close');
});

test('GET /metrics serves valid Prometheus text with the recorded values', async () => {
  recorder.record('doc-a', 'accepted', 4, 0, 0.2, 1.2, 1.5);
  recorder.record('doc-a', 'stale', 1, 0, 0.05, NaN, 0.1);
  const response = await fetch(`${origin}/metrics`);
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('content-type'), registry.contentType);
  const families = parsePrometheusText(await response.text());
  assert.equal(
    sampleValue(families, 'scriptorium_steps_batches_total', { outcome: 'accepted' }),
    1,
  );
  assert.equal(sampleValue(families, 'scriptorium_steps_batches_total', { outcome: 'stale' }), 1);
  assert.equal(sampleValue(families, 'scriptorium_steps_accepted_total'), 4);
  assert.equal(sampleValue(families, 'scriptorium_steps_latency_seconds_count'), 2);
  assert.equal(
    sampleValue(families, 'scriptorium_steps_latency_seconds_bucket', { le: '0.0001' }),
    1,
  );
  assert.equal(sampleValue(families, 'scriptorium_editors_connected'), 3);
  assert.ok(families.has('process_resident_memory_bytes'));
});

test('GET /metrics/windows returns exactly what the window listener logged', async () => {
  recorder.record('doc-b', 'accepted', 2, 0, 0.1, 0.3, 0.4);
  clock.ms = base + 30_000;
  assert.equal(recorder.tick(), 3);
  const response = await fetch(`${origin}/metrics/windows?last=2`);
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
  const body = (await response.json()) as { windows: MetricsWindow[] };
  assert.deepEqual(
    body.windows,
    logged.slice(-2).map((line) => JSON.parse(line)),
  );
  // Default is the last 30: all three closed so far, oldest first, with the traffic in the first.
  const all = (await (await fetch(`${origin}/metrics/windows`)).json()) as {
    windows: MetricsWindow[];
  };
  assert.deepEqual(
    all.windows.map((w) => [w.startMs - base, w.batchesReceived, w.editors]),
    [
      [0, 3, 3],
      [10_000, 0, 3],
      [20_000, 0, 3],
    ],
  );
  assert.deepEqual(all.windows[0].rejections, { stale: 1 });
  assert.deepEqual(
    all.windows[0].topDocuments.map((d) => d.documentId),
    ['doc-a', 'doc-b'],
  );
});

test('GET /metrics/windows refuses a bad last with a bad-request body', async () => {
  for (const last of ['0', '361', 'abc', '1e2', '-1', '2.5', '']) {
    const response = await fetch(`${origin}/metrics/windows?last=${encodeURIComponent(last)}`);
    assert.equal(response.status, 400, `last=${last}`);
    const body = (await response.json()) as { code: string; message: string };
    assert.equal(body.code, 'bad-request');
    assert.match(body.message, /1 to 360/);
  }
  const repeated = await fetch(`${origin}/metrics/windows?last=1&last=2`);
  assert.equal(repeated.status, 400);
  const edge = await fetch(`${origin}/metrics/windows?last=360`);
  assert.equal(edge.status, 200);
});

test('GET /dashboard serves the charts page, its script and its style, all from this server', async () => {
  const response = await fetch(`${origin}/dashboard`);
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
  const html = await response.text();
  for (const id of ['chart-latency', 'chart-rps', 'chart-editors', 'chart-eventloop']) {
    assert.match(html, new RegExp(`<canvas id="${id}">`));
  }
  assert.doesNotMatch(html, /https?:\/\//, 'nothing fetched from the internet');
  // No inline script or style: the Content-Security-Policy would refuse them.
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script');
  assert.doesNotMatch(html, /<style|\sstyle=|\son[a-z]+=/i, 'no inline style or handler');

  // The page's own references, resolved as the browser resolves them.
  const scriptSrc = /<script[^>]+src="([^"]+)"/.exec(html)?.[1];
  const styleHref = /<link rel="stylesheet" href="([^"]+)"/.exec(html)?.[1];
  assert.ok(scriptSrc && styleHref);
  const script = await fetch(new URL(scriptSrc, `${origin}/dashboard`));
  assert.equal(script.status, 200);
  assert.match(script.headers.get('content-type') ?? '', /^(text|application)\/javascript/);
  const code = await script.text();
  assert.match(code, /fetch\("metrics\/windows\?last="/);
  // The script must at least parse: a syntax error would leave an empty page.
  assert.doesNotThrow(() => new Function(code));
  const style = await fetch(new URL(styleHref, `${origin}/dashboard`));
  assert.equal(style.status, 200);
  assert.match(style.headers.get('content-type') ?? '', /^text\/css/);
  assert.match(await style.text(), /canvas \{/);
});

test('GET /dashboard/ (a trailing slash) leads to the page, whose script and style then load', async () => {
  const redirect = await fetch(`${origin}/dashboard/?from=bookmark`, { redirect: 'manual' });
  assert.equal(redirect.status, 301);
  assert.equal(
    new URL(redirect.headers.get('location')!, `${origin}/dashboard/`).href,
    `${origin}/dashboard?from=bookmark`,
  );
  const page = await fetch(`${origin}/dashboard/`);
  assert.equal(page.status, 200);
  const html = await page.text();
  const assets = [...html.matchAll(/(?:src|href)="(dashboard\/[^"]+)"/g)].map((m) => m[1]!);
  assert.deepEqual(assets.sort(), ['dashboard/app.css', 'dashboard/app.js']);
  for (const asset of assets) {
    // Resolved as the browser does, against the address the page ended up at.
    const response = await fetch(new URL(asset, page.url));
    assert.equal(response.status, 200, `${asset} from ${page.url}`);
  }
});
