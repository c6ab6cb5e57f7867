import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { signToken } from '../../server/protocol/auth.js';
import { launchChromium } from '../support/browser.js';
import { startServer, type TestServer } from '../support/server.js';

// Tokens in the URL fragment, in real Chromium: the web editor and the dashboard read them
// from `#token=…` (which never reaches the server) and use them; without one the editor is
// refused and says so.

const secret = 'browser-test-secret-long-enough-0123456789';
const metricsToken = 'browser-metrics-token-0123';

describe('tokens in the fragment, in a browser', () => {
  let server: TestServer;
  let browser: Browser;
  /// Request URLs the server was asked for, to check the token never travels in one.
  const requested: string[] = [];

  before(async () => {
    server = await startServer({ authSecret: secret, metricsToken });
    server.server.http.prependListener('request', (req) => requested.push(req.url ?? ''));
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  async function page(): Promise<Page> {
    const context = await browser.newContext();
    context.setDefaultTimeout(10_000);
    return context.newPage();
  }

  it('the editor connects and edits with the token from its fragment, and is refused without one', async () => {
    const token = await signToken(secret, {
      user: 'ann',
      doc: 'fragment-doc',
      access: 'write',
      ttlSeconds: 600,
    });
    const editor = await page();
    await editor.goto(`${server.url}/d/fragment-doc#token=${token}`);
    await editor.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
    await editor.click('.ProseMirror');
    await editor.keyboard.type('typed with a token');
    await editor.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
    const served = await fetch(`${server.url}/docs/fragment-doc`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.match(JSON.stringify(await served.json()), /typed with a token/);
    assert.ok(!requested.some((url) => url.includes(token)), 'the token never left in a URL');

    const refused = await page();
    await refused.goto(`${server.url}/d/fragment-doc`);
    await refused.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'failed',
    );
    await refused.context().close();
    await editor.context().close();
  });

  it('the dashboard polls with the metrics token from its fragment', async () => {
    const withToken = await page();
    await withToken.goto(`${server.url}/dashboard#token=${metricsToken}`);
    await withToken.waitForFunction(
      () => !/Loading/.test(document.getElementById('status')!.textContent ?? ''),
    );
    assert.doesNotMatch((await withToken.textContent('#status')) ?? '', /failed/i);
    const without = await page();
    await without.goto(`${server.url}/dashboard`);
    await without.waitForFunction(() =>
      /failed/i.test(document.getElementById('status')!.textContent ?? ''),
    );
    assert.match((await without.textContent('#status')) ?? '', /401/);
    assert.ok(!requested.some((url) => url.includes(metricsToken)));
    await withToken.context().close();
    await without.context().close();
  });
});
