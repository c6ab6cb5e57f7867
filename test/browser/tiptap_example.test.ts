import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { CollabClient } from '../../client/index.js';
import { MemoryStore } from '../../server/index.js';
import { StoreUnavailableError } from '../../server/stores/store.js';
import { errorBody } from '../../schema/errors.js';
import { type StepsAnswer, type SyncAnswer } from '../../schema/events.js';
import { schema } from '../../examples/tiptap/extensions.js';
import { startExample } from '../../examples/tiptap/server.js';
import { launchChromium } from '../support/browser.js';
import { ask, rawSocket } from '../support/socket.js';

// The Tiptap example end to end, in real Chromium: two pages on one document type, make text
// bold, make a heading and a bullet list (through Tiptap's own shortcuts and input rules), and
// end with the same document as each other and as the server.

const bundle = new URL('../../examples/tiptap/public/page.js', import.meta.url);

/// A page to link to, on a server of its own, that reports whether it was opened with a
/// `window.opener` (`reports` holds the paths it was asked for, `/report?opener=…` among them).
async function linkedPage(): Promise<{ reports: string[]; linked: Server; href: string }> {
  const reports: string[] = [];
  const linked = createServer((request, response) => {
    reports.push(request.url ?? '');
    response.setHeader('content-type', 'text/html');
    response.end("<script>fetch('/report?opener=' + (window.opener !== null))</script>");
  });
  await new Promise<void>((resolve) => linked.listen(0, '127.0.0.1', resolve));
  const href = `http://127.0.0.1:${(linked.address() as AddressInfo).port}/minutes`;
  return { reports, linked, href };
}

describe('the Tiptap example in a browser', () => {
  let example: Awaited<ReturnType<typeof startExample>>;
  let browser: Browser;

  before(async () => {
    if (!existsSync(bundle)) throw new Error('The example bundle is missing: run `npm run build`.');
    example = await startExample();
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await example?.close();
  });

  async function open(docId: string, query = ''): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    page.on('pageerror', (err) => {
      throw new Error(`the page threw: ${err.message}`);
    });
    await page.goto(`${example.url}/?doc=${docId}${query}`);
    await synced(page);
    return page;
  }

  function synced(page: Page): Promise<unknown> {
    return page.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
  }

  /// The document a page shows, from Tiptap's editor, as JSON text.
  function docOf(page: Page): Promise<string> {
    return page.evaluate(() => JSON.stringify(window.__example!.editor.getJSON()));
  }

  it('two pages type, bold, make a heading and a list, and converge', async () => {
    const first = await open('tiptap-shared');
    const second = await open('tiptap-shared');

    // The first page writes a heading, then a paragraph with a bold word.
    await first.click('.tiptap');
    await first.keyboard.type('# Minutes');
    await first.keyboard.press('Enter');
    await first.keyboard.type('We agreed on ');
    await first.keyboard.press('Control+b');
    await first.keyboard.type('everything');
    await first.keyboard.press('Control+b');
    await synced(first);
    // Then the first page goes on in the heading while the second, at the same time, adds a
    // bullet list at the end. (Apart on purpose: two people typing at one position interleave
    // their characters, which converges but to no text this test could name.)
    await second.waitForFunction(() => window.__example!.editor.getText().includes('everything'));
    await first.keyboard.press('Control+Home');
    await first.keyboard.press('End');
    await second.click('.tiptap');
    await second.keyboard.press('Control+End');
    // A key that moves the caret moves the DOM's; ProseMirror reads it on the next
    // selectionchange. A remote update landing before that writes the old selection back (the
    // browser race noted in editor.test.ts), so wait until each editor holds its caret where
    // the keys put it, as a person's next key would come later anyway.
    await first.waitForFunction(() => {
      const { state } = window.__example!.editor;
      return state.selection.empty && state.selection.from === state.doc.firstChild!.nodeSize - 1;
    });
    await second.waitForFunction(() => {
      const { state } = window.__example!.editor;
      return state.selection.empty && state.selection.from >= state.doc.content.size - 1;
    });
    await second.keyboard.press('Enter');
    const typing = first.keyboard.type(' for today');
    await second.keyboard.type('- first item');
    await second.keyboard.press('Enter');
    await second.keyboard.type('second item');
    await typing;
    await synced(first);
    await synced(second);

    // Both pages and the server end with the same document.
    const served = async () =>
      JSON.stringify(
        ((await (await fetch(`${example.url}/docs/tiptap-shared`)).json()) as { doc: unknown }).doc,
      );
    const deadline = Date.now() + 10_000;
    let a = '';
    let b = '';
    let s = '';
    while (Date.now() < deadline) {
      [a, b, s] = await Promise.all([docOf(first), docOf(second), served()]);
      if (a === b && b === s) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(a, b, 'the two pages show the same document');
    assert.equal(a, s, 'and the server holds it');
    const doc = JSON.parse(s) as { content: { type: string; attrs?: { level?: number } }[] };
    const types = doc.content.map((node) => node.type);
    assert.equal(types[0], 'heading', s);
    assert.equal(doc.content[0]!.attrs?.level, 1);
    assert.ok(types.includes('bulletList'), JSON.stringify(types));
    assert.match(s, /"type":"bold"/);
    for (const text of ['Minutes for today', 'everything', 'first item', 'second item']) {
      assert.ok(s.includes(text), `${text} is in ${s}`);
    }
    await first.context().close();
    await second.context().close();
  });
  it('a read-only page follows the edits and cannot make any', async () => {
    const writer = await open('tiptap-observed');
    const reader = await open('tiptap-observed', '&readonly=1');
    assert.equal(await reader.evaluate(() => window.__example!.editor.view.editable), false);
    await writer.click('.tiptap');
    await writer.keyboard.type('Seen by all');
    await reader.waitForFunction(() => window.__example!.editor.getText() === 'Seen by all');
    // Typing into the observer's page changes nothing, there or anywhere.
    await reader.click('.tiptap');
    await reader.keyboard.type('never sent');
    await synced(reader);
    assert.equal(await reader.evaluate(() => window.__example!.editor.getText()), 'Seen by all');
    assert.equal(await reader.evaluate(() => window.__example!.client.hasUnconfirmed), false);
    assert.equal(await writer.evaluate(() => window.__example!.editor.getText()), 'Seen by all');
    await writer.context().close();
    await reader.context().close();
  });

  it("a click on a collaborator's link opens no page that could take over the editor's tab", async (t) => {
    // StarterKit's link opened on click with `window.open(href, target)`, without noopener: the
    // opened page got `window.opener` and could send the editor's tab elsewhere (reverse
    // tabnabbing). This page reports whether it was opened and with an opener.
    const { reports, linked, href } = await linkedPage();
    const writer = new CollabClient({ url: example.url, docId: 'tiptap-link', schema });
    t.after(async () => {
      writer.close();
      await new Promise((resolve) => linked.close(resolve));
    });
    await writer.ready();
    const tr = writer.state!.tr.insertText('see the minutes', 1);
    writer.dispatch(tr.addMark(1, 16, schema.marks['link']!.create({ href })));
    await writer.settled();

    const page = await open('tiptap-link');
    await page.waitForSelector('.tiptap a');
    const opened: Page[] = [];
    page.context().on('page', (other) => opened.push(other));
    await page.click('.tiptap a');
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.deepEqual(reports, [], 'the linked page was not opened');
    assert.equal(opened.length, 0);
    assert.equal(new URL(page.url()).origin, example.url, 'the editor stayed');
    await page.context().close();
  });

  it("a link sent with rel=opener opens its page without the editor's window as opener", async (t) => {
    // Tiptap's Link kept `rel`, `target` and `class` as attributes of the mark, which any
    // collaborator sets in a step, and rendered them as stored: `rel="opener"` with
    // `target="_blank"` gave the opened page `window.opener` when the link was clicked where
    // the browser follows it (a read-only page, a middle click), and the page could send the
    // editor's tab elsewhere. This page reports whether it has an opener.
    const { reports, linked, href } = await linkedPage();
    // A step written by hand, over a bare socket: no editor of the example makes this mark.
    const socket = rawSocket(example.url, 'tiptap-opener', 'crafted');
    t.after(async () => {
      socket.close();
      await new Promise((resolve) => linked.close(resolve));
    });
    const joined = await ask<SyncAnswer>(socket, 'join', {});
    assert.ok(joined.ok, JSON.stringify(joined));
    const attrs = { href, rel: 'opener', target: '_blank', class: 'tiptap' };
    const text = { type: 'text', text: 'the minutes', marks: [{ type: 'link', attrs }] };
    const step = { stepType: 'replace', from: 1, to: 1, slice: { content: [text] } };
    const answer = await ask<StepsAnswer>(socket, 'steps', {
      version: joined.version,
      steps: [step],
    });
    // The schema has no such attributes: the step is taken, without them.
    assert.ok(answer.ok, JSON.stringify(answer));
    const served = await (await fetch(`${example.url}/docs/tiptap-opener`)).text();
    assert.ok(served.includes(href), served);
    assert.doesNotMatch(served, /opener|"target"|"class"/);

    const page = await open('tiptap-opener', '&readonly=1');
    const anchor = await page.waitForSelector('.tiptap a');
    assert.equal(await anchor.getAttribute('rel'), 'noopener noreferrer nofollow');
    assert.equal(await anchor.getAttribute('target'), '_blank');
    // The observer's view is not editable, so the browser follows the click, in a new tab.
    const opened = page.context().waitForEvent('page');
    await anchor.click();
    await (await opened).waitForLoadState();
    const deadline = Date.now() + 5_000;
    const opener = () => reports.filter((url) => url.startsWith('/report'));
    while (opener().length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    // (The browser may ask for /favicon.ico too.)
    assert.equal(reports[0], '/minutes');
    assert.deepEqual(opener(), ['/report?opener=false']);
    await page.context().close();
  });

  it('answers a document address that is not valid percent-encoding with 400, and stays up', async () => {
    // `decodeURIComponent` threw inside the request handler, and the process exited.
    const bad = await fetch(`${example.url}/docs/%E0%A4%A`);
    assert.equal(bad.status, 400);
    const good = await fetch(`${example.url}/docs/tiptap-after-bad`);
    assert.equal(good.status, 404);
    assert.deepEqual(await good.json(), errorBody('not-found'));
  });

  it('answers a request target that is not a URL with 400 bad-request, and stays up', async () => {
    // `//[` is a request target Node's parser takes and `new URL` throws on: the throw, in
    // the request handler, ended the process.
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(example.url).port), '127.0.0.1', () =>
        socket.end('GET //[ HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n'),
      );
      let text = '';
      socket.on('data', (chunk) => (text += chunk));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    assert.match(answer, /^HTTP\/1\.1 400 /);
    assert.deepEqual(
      JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)),
      errorBody('bad-request', 'The request target is not a URL'),
    );
    assert.equal((await fetch(`${example.url}/docs/tiptap-after-bad-url`)).status, 404);
    const missing = await fetch(`${example.url}/server.js`);
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).code, 'not-found');
  });

  it('answers GET /docs/:id with 503 and the coded unavailable body when the store fails', async (t) => {
    // It answered a bare 500 with no body, as if the example itself had failed.
    class FailingLoads extends MemoryStore {
      override async load(): Promise<never> {
        throw new StoreUnavailableError('ECONNREFUSED 10.0.0.7:6379');
      }
    }
    const failing = await startExample(0, '127.0.0.1', new FailingLoads());
    t.after(() => failing.close());
    const answer = await fetch(`${failing.url}/docs/tiptap-store-down`);
    assert.equal(answer.status, 503);
    assert.match(answer.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(await answer.json(), errorBody('unavailable'));
  });

  it('answers a document id that is not one with 400 bad-document-id, as the server does', async () => {
    // Well encoded, but not a document id (a space, 129 characters, a `}`, a `/`): the store
    // threw on it and the example answered 500 with no body, as if it had failed.
    for (const id of ['bad%20id', 'a'.repeat(129), 'a%7Db', 'a%2Fb', '%E0%A4%A']) {
      const answer = await fetch(`${example.url}/docs/${id}`);
      assert.equal(answer.status, 400, id);
      assert.match(answer.headers.get('content-type') ?? '', /^application\/json/, id);
      assert.deepEqual(await answer.json(), errorBody('bad-document-id'), id);
    }
  });
});
