import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, BrowserContextOptions, Page } from 'playwright-core';
import { schemaVersion } from '../../schema/index.js';
import { type DocJSON } from '../../schema/events.js';
import { MemoryStore } from '../../server/stores/memory_store.js';
import { launchChromium, requireWebBundle } from '../support/browser.js';
import { startServer, type TestServer } from '../support/server.js';

// The pages in real Chromium with the server's Content-Security-Policy in force: our own
// pages work without a single violation, script that gets into a page by any route does not
// run, and a stored `javascript:` link is shown but cannot be followed.

/// A `securitypolicyviolation` event as the page saw it.
interface Violation {
  directive: string;
  blocked: string;
}

declare global {
  interface Window {
    __violations?: Violation[];
    /// Set by the injected scripts if they ever run.
    __ran?: string[];
  }
}

/// A stored document written before the server refused unsafe addresses: a paragraph with one
/// honest link and unsafe ones in the spellings a browser would still follow.
const unsafeHrefs = [
  "javascript:void(document.title='pwned')",
  "JaVaScRiPt:void(document.title='pwned')",
  "java\tscript:void(document.title='pwned')",
  " \u0001javascript:void(document.title='pwned')",
  'data:text/html,<script>opener.document.title="pwned"</script>',
];
const storedDoc: DocJSON = {
  type: 'doc',
  content: [
    {
      type: 'paragraph',
      content: [
        { type: 'text', text: 'Read ' },
        {
          type: 'text',
          text: 'the guide',
          marks: [{ type: 'link', attrs: { href: 'https://example.com/guide', title: 'Guide' } }],
        },
        ...unsafeHrefs.flatMap((href, i) => [
          { type: 'text', text: ' or ' },
          {
            type: 'text',
            text: `trap ${i}`,
            marks: [{ type: 'link', attrs: { href, title: null } }],
          },
        ]),
      ],
    },
  ],
} as DocJSON;

describe('the pages under the Content-Security-Policy', () => {
  let server: TestServer;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  before(async () => {
    requireWebBundle();
    // Written straight into the store: the server never checks a stored document's links.
    const store = new MemoryStore();
    const stored = await store.snapshot('stored-links', {
      doc: storedDoc,
      version: 0,
      epoch: 'csp-test',
      schemaVersion,
      savedAt: Date.now(),
    });
    assert.equal(stored.ok, true);
    server = await startServer({}, store);
    browser = await launchChromium();
  });

  after(async () => {
    for (const context of contexts) await context.close().catch(() => {});
    await browser?.close();
    await server?.close();
  });

  /// A page that records every policy violation, reported as an event or on the console.
  async function newPage(options: BrowserContextOptions = {}): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 900, height: 600 }, ...options });
    contexts.push(context);
    context.setDefaultTimeout(10_000);
    // Init scripts are injected by the browser's debugging protocol, which the policy does
    // not govern; the listener is in place before any of the page's own script runs.
    await context.addInitScript(() => {
      window.__violations = [];
      document.addEventListener(
        'securitypolicyviolation',
        (event) =>
          window.__violations!.push({
            directive: event.effectiveDirective,
            blocked: event.blockedURI,
          }),
        true,
      );
    });
    const page = await context.newPage();
    page.on('pageerror', (err) => {
      throw new Error(`the page threw: ${err.message}`);
    });
    const logged: Violation[] = [];
    consoleViolations.set(page, logged);
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) {
        logged.push({ directive: 'console', blocked: message.text() });
      }
    });
    return page;
  }

  const consoleViolations = new WeakMap<Page, Violation[]>();

  /// The violations `page` reported as events, then those it logged on the console.
  async function violations(page: Page): Promise<Violation[]> {
    const events = await page.evaluate(() => window.__violations ?? []);
    return [...events, ...(consoleViolations.get(page) ?? [])];
  }

  async function openDocument(page: Page, docId: string): Promise<void> {
    const response = await page.goto(`${server.url}/d/${docId}`);
    assert.equal(response?.status(), 200);
    assert.match((await response!.allHeaders())['content-security-policy'] ?? '', /script-src/);
    await page.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
  }

  it('the editor loads, connects over a WebSocket and edits together with no violation', async () => {
    const ada = await newPage();
    const bob = await newPage();
    await openDocument(ada, 'csp-editing');
    await openDocument(bob, 'csp-editing');

    await ada.locator('.ProseMirror').click();
    await ada.keyboard.type('Typed under the policy');
    await ada.keyboard.down('Shift');
    for (let i = 0; i < 6; i++) await ada.keyboard.press('ArrowLeft');
    await ada.keyboard.up('Shift');
    await ada.locator('.ProseMirror-menubar [title^="Bold"]').click();
    // Bob sees the text, the bold word and Ada's coloured selection (a style set by script).
    await bob.waitForFunction(() => {
      // The text of the first paragraph and of its bold part, without the remote caret's label.
      const copy = document.querySelector('.ProseMirror p')?.cloneNode(true) as HTMLElement;
      for (const caret of Array.from(copy?.querySelectorAll('.scriptorium-caret') ?? [])) {
        caret.remove();
      }
      return (
        copy?.textContent === 'Typed under the policy' &&
        copy.querySelector('strong')?.textContent === 'policy'
      );
    });
    await bob.locator('.scriptorium-selection').first().waitFor();
    const served = (await (await fetch(`${server.url}/docs/csp-editing`)).json()) as {
      doc: DocJSON;
    };
    assert.match(JSON.stringify(served.doc), /Typed under the /);

    // connect-src 'self' lets Socket.io upgrade to a WebSocket on the same origin.
    for (const page of [ada, bob]) {
      await page.waitForFunction(
        () => window.__scriptorium!.client.socket.io.engine.transport.name === 'websocket',
      );
      assert.deepEqual(await violations(page), []);
    }
  });

  it('the error page and the dashboard show styled, with no violation', async () => {
    const page = await newPage();
    const response = await page.goto(`${server.url}/d/${encodeURIComponent('no spaces!')}`);
    assert.equal(response?.status(), 400);
    assert.equal(await page.textContent('h1'), 'Not a document address');
    // Its style comes from the stylesheet now, not from an inline <style>.
    assert.equal(
      await page.evaluate(() => getComputedStyle(document.body).marginTop),
      await page.evaluate(() => `${4 * parseFloat(getComputedStyle(document.body).fontSize)}px`),
    );
    assert.deepEqual(await violations(page), []);

    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction(
      () => !/Loading/.test(document.getElementById('status')!.textContent ?? ''),
    );
    assert.doesNotMatch((await page.textContent('#status')) ?? '', /failed/i);
    assert.equal(await page.evaluate(() => getComputedStyle(document.body).marginTop), '16px');
    assert.deepEqual(await violations(page), []);
  });

  it('script injected into the page does not run, and each attempt is reported', async () => {
    const page = await newPage();
    await openDocument(page, 'csp-injection');
    const title = await page.title();

    await page.evaluate(() => {
      // What a stored-XSS payload would try: an event handler, an inline <script>, and a
      // javascript: link for the reader to click.
      document.body.insertAdjacentHTML(
        'beforeend',
        `<img src="data:," onerror="(window.__ran ??= []).push('onerror')">` +
          `<a id="trap" href="javascript:(window.__ran ??= []).push('link')">trap</a>`,
      );
      const script = document.createElement('script');
      script.textContent = "(window.__ran ??= []).push('script')";
      document.body.append(script);
    });
    await page.click('#trap');
    await page.waitForFunction(
      () => new Set(window.__violations!.map((v) => v.directive)).size >= 2,
    );
    assert.equal(await page.evaluate(() => window.__ran), undefined, 'no injected script ran');
    assert.equal(await page.title(), title);
    const reported = await violations(page);
    const directives = new Set(reported.map((v) => v.directive));
    assert.ok(
      directives.has('script-src-attr'),
      `the handler reported: ${JSON.stringify(reported)}`,
    );
    assert.ok(
      directives.has('script-src-elem'),
      `the script reported: ${JSON.stringify(reported)}`,
    );
    assert.ok(
      reported.filter((v) => v.directive === 'script-src-elem').length >= 2,
      `the <script> and the javascript: link both reported: ${JSON.stringify(reported)}`,
    );
    // The editor carries on.
    await page.locator('.ProseMirror').click();
    await page.keyboard.type('still editing');
    await page.waitForFunction(
      () =>
        !window.__scriptorium!.client.hasUnconfirmed &&
        window.__scriptorium!.client.status === 'synced',
    );
  });

  it('a stored document holding javascript: links is never served, but quarantined', async () => {
    // Written before the server checked link schemes (straight into the store here): the
    // server refuses to load it rather than serve the script to readers (non-retryable).
    const response = await fetch(`${server.url}/docs/stored-links`);
    assert.equal(response.status, 500);
    const body = (await response.json()) as { code: string; retryable: boolean };
    assert.equal(body.code, 'corrupt');
    assert.equal(body.retryable, false);
    const page = await newPage();
    await page.goto(`${server.url}/d/stored-links`);
    await page.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'failed',
    );
    assert.equal(await page.locator('.ProseMirror a').count(), 0, 'no link was drawn');
    assert.deepEqual(await violations(page), []);
  });
});
