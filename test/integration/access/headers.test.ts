import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { emptyDoc, schemaVersion } from '../../../schema/index.js';
import { MemoryStore } from '../../../server/stores/memory_store.js';
import { startServer, type TestServer } from '../../support/server.js';

// Every kind of answer the server's HTTP side makes carries the same security headers: they
// are set before any route runs, so a route added later cannot forget them.
const bundle = new URL('../../../web-bundle/index.html', import.meta.url);

/// The Content-Security-Policy header as a map from directive to its sources.
function parsePolicy(header: string): Map<string, string[]> {
  const policy = new Map<string, string[]>();
  for (const part of header.split(';')) {
    const [name, ...sources] = part.trim().split(/\s+/);
    if (name) policy.set(name.toLowerCase(), sources);
  }
  return policy;
}

function assertSecurityHeaders(response: Response, what: string): void {
  const header = response.headers.get('content-security-policy');
  assert.ok(header, `${what}: a Content-Security-Policy`);
  assert.doesNotMatch(header, /unsafe-inline|unsafe-eval|unsafe-hashes/, `${what}: nothing unsafe`);
  const policy = parsePolicy(header);
  assert.deepEqual(policy.get('default-src'), ["'self'"], what);
  assert.deepEqual(policy.get('script-src'), ["'self'"], `${what}: only our own script files`);
  assert.deepEqual(policy.get('script-src-attr'), ["'none'"], `${what}: no event handlers`);
  assert.deepEqual(policy.get('style-src'), ["'self'"], what);
  assert.deepEqual(policy.get('connect-src'), ["'self'"], what);
  assert.deepEqual(
    [...(policy.get('img-src') ?? [])].sort(),
    ["'self'", 'data:', 'http:', 'https:'],
    `${what}: images from anywhere`,
  );
  for (const directive of ['object-src', 'base-uri', 'form-action', 'frame-ancestors']) {
    assert.deepEqual(policy.get(directive), ["'none'"], `${what}: ${directive}`);
  }
  // The standalone server speaks plain http: an upgrade would break every asset.
  assert.equal(policy.has('upgrade-insecure-requests'), false, what);

  const headers = response.headers;
  assert.equal(headers.get('x-content-type-options'), 'nosniff', what);
  assert.equal(headers.get('referrer-policy'), 'no-referrer', what);
  assert.equal(headers.get('x-frame-options'), 'DENY', what);
  assert.equal(headers.get('cross-origin-opener-policy'), 'same-origin', what);
  assert.equal(headers.get('cross-origin-resource-policy'), 'same-origin', what);
  assert.equal(headers.get('strict-transport-security'), null, `${what}: no HSTS on plain http`);
  assert.equal(headers.get('x-powered-by'), null, what);
}

describe('security headers', () => {
  let server: TestServer;

  before(async () => {
    if (!existsSync(bundle)) {
      throw new Error('The web bundle is missing: run `npm run build` before the tests.');
    }
    const store = new MemoryStore();
    const stored = await store.snapshot('stored', {
      doc: emptyDoc().toJSON(),
      version: 0,
      epoch: 'headers-test',
      schemaVersion,
      savedAt: Date.now(),
    });
    assert.equal(stored.ok, true);
    server = await startServer({}, store);
  });

  after(async () => {
    await server?.close();
  });

  // [what, path, expected status, expected content type]
  const answers: [string, string, number, RegExp][] = [
    ['the editor page', '/d/some-document', 200, /^text\/html/],
    ['the error page for a bad address', `/d/${encodeURIComponent('no spaces!')}`, 400, /html/],
    ['the editor script', '/assets/main.js', 200, /javascript/],
    ['the editor style', '/assets/style.css', 200, /^text\/css/],
    ['a missing asset', '/assets/missing.js', 404, /^application\/json/],
    ['a source map, not published', '/assets/main.js.map', 404, /^application\/json/],
    ['a source map asked for percent-encoded', '/assets/main.js.ma%70', 404, /^application\/json/],
    ['a source map, its dot encoded', '/assets/main.js%2emap', 404, /^application\/json/],
    ['the page under /assets', '/assets/index.html', 404, /^application\/json/],
    ['the page under /assets, encoded', '/assets/%69ndex.html', 404, /^application\/json/],
    ['a malformed asset path', '/assets/%E0%A4%A', 404, /^application\/json/],
    ['a stored document', '/docs/stored', 200, /^application\/json/],
    ['an unknown document', '/docs/never-seen', 404, /^application\/json/],
    ['an error answer for a malformed request', '/docs/%E0%A4%A', 400, /^application\/json/],
    ['the health check', '/healthz', 200, /^application\/json/],
    ['the metrics', '/metrics', 200, /^text\/plain/],
    ['the metrics windows', '/metrics/windows?last=1', 200, /^application\/json/],
    ['a refused metrics query', '/metrics/windows?last=0', 400, /^application\/json/],
    ['the dashboard', '/dashboard', 200, /^text\/html/],
    ['the dashboard script', '/dashboard/app.js', 200, /javascript/],
    ['the dashboard style', '/dashboard/app.css', 200, /^text\/css/],
    ['an unknown route', '/no/such/route', 404, /^application\/json/],
  ];

  for (const [what, path, status, type] of answers) {
    it(`on ${what} (${status})`, async () => {
      const response = await fetch(`${server.url}${path}`);
      assert.equal(response.status, status, what);
      assert.match(response.headers.get('content-type') ?? '', type, what);
      assertSecurityHeaders(response, what);
      await response.arrayBuffer();
    });
  }

  it('on the redirect from / to a new document (302)', async () => {
    const response = await fetch(`${server.url}/`, { redirect: 'manual' });
    assert.equal(response.status, 302);
    assert.match(response.headers.get('location') ?? '', /^\/d\/[A-Za-z0-9_-]{16}$/);
    assertSecurityHeaders(response, 'the redirect');
  });
});
