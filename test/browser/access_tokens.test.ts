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

  it('offline work outlives an expired token: the page says so, and a fresh link in the tab sends it', async () => {
    const docId = 'fragment-expiry';
    // Long enough for the page to load and sync on a loaded machine; the test waits for the
    // expiry itself, not a fixed time.
    const ttlSeconds = 10;
    const expiresAt = Date.now() + ttlSeconds * 1000;
    const token = await signToken(secret, { user: 'ann', doc: docId, access: 'write', ttlSeconds });
    const editor = await page();
    editor.on('pageerror', (err) => {
      throw new Error(`the page threw: ${err.message}`);
    });
    await editor.goto(`${server.url}/d/${docId}#token=${token}`);
    const status = (state: string) =>
      editor.waitForFunction(
        (wanted) => document.getElementById('status')?.dataset['state'] === wanted,
        state,
      );
    await status('synced');
    await editor.click('.ProseMirror');
    await editor.keyboard.type('Saved online. ');
    await status('synced');
    await editor.context().setOffline(true);
    await editor.evaluate(() => window.__scriptorium!.client.socket.io.engine.close());
    await status('offline');
    await editor.keyboard.type('Offline work.');
    await new Promise((resolve) =>
      setTimeout(resolve, Math.max(0, expiresAt - Date.now()) + 1_500),
    );

    // Back online, the token in the address has expired: the page keeps the work and says how
    // to send it, and that reloading would lose it.
    await editor.context().setOffline(false);
    await status('refused');
    const notice = editor.locator('#notice');
    await notice.waitFor({ state: 'visible' });
    const text = (await notice.textContent()) ?? '';
    assert.match(text, /\d+ unsent changes?/);
    assert.match(text, /fresh link/);
    assert.match(text, /reload/i);
    assert.equal(
      await editor.evaluate(() => window.__scriptorium!.view!.state.doc.textContent),
      'Saved online. Offline work.',
    );

    // Opening a fresh link in the same tab changes only the fragment: the page stays, and the
    // client's next handshake carries the new token.
    const fresh = await signToken(secret, {
      user: 'ann',
      doc: docId,
      access: 'write',
      ttlSeconds: 600,
    });
    await editor.goto(`${server.url}/d/${docId}#token=${fresh}`);
    await status('synced');
    await notice.waitFor({ state: 'hidden' });
    const served = await fetch(`${server.url}/docs/${docId}`, {
      headers: { authorization: `Bearer ${fresh}` },
    });
    assert.match(JSON.stringify(await served.json()), /Saved online\. Offline work\./);
    await editor.context().close();
  });

  it("the editor sends a fragment's token with its '+' kept and its escapes decoded once", async (t) => {
    // An embedding host's token is opaque to us and may be base64 (with `+`): the editor read
    // the fragment with URLSearchParams, which turned each `+` into a space, so such a token
    // was refused. An open server, so that the handshake reaches the recorder below.
    const open = await startServer();
    const sent: unknown[] = [];
    open.server.io.use((socket, next) => {
      sent.push(socket.handshake.auth['token']);
      next();
    });
    t.after(() => open.close());
    const editor = await page();
    await editor.goto(`${open.url}/d/plus-token#token=a+b%2Bc%20d%2541&view=1`);
    await editor.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
    assert.deepEqual(sent, ['a+b+c d%41']);
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
