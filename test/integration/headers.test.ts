import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/server.js';

// Every kind of answer the HTTP side gives carries the security headers: a page a browser
// renders, and anything a page could be tricked into loading.
describe('security headers', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  const routes: [string, number][] = [
    ['/', 302],
    ['/d/some-doc', 200],
    ['/d/has%20space', 400],
    ['/assets/main.js', 200],
    ['/docs/unknown-doc', 404],
    ['/docs/%E0%A4%A', 400],
    ['/healthz', 200],
    ['/metrics', 200],
    ['/metrics/windows?last=nope', 400],
    ['/dashboard', 200],
    ['/dashboard/dashboard.js', 200],
    ['/no/such/route', 404],
  ];

  for (const [path, status] of routes) {
    it(`${path} answers ${status} with them`, async () => {
      const response = await fetch(server.url + path, { redirect: 'manual' });
      assert.equal(response.status, status);
      const csp = response.headers.get('content-security-policy') ?? '';
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.doesNotMatch(csp, /unsafe-inline'[^;]*;?\s*script|script-src[^;]*unsafe/);
      assert.match(csp, /object-src 'none'/);
      assert.match(csp, /frame-ancestors 'none'/);
      assert.match(csp, /base-uri 'none'/);
      assert.match(csp, /connect-src 'self'/);
      assert.doesNotMatch(csp, /upgrade-insecure-requests/);
      assert.equal(response.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(response.headers.get('referrer-policy'), 'no-referrer');
      assert.equal(response.headers.get('x-frame-options'), 'SAMEORIGIN');
      assert.equal(response.headers.get('x-powered-by'), null);
      await response.arrayBuffer();
    });
  }
});
