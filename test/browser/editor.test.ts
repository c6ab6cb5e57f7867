import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { schema } from '../../schema/index.js';
import {
  artifacts,
  editorPage,
  launchChromium,
  requireWebBundle,
  waitStatus,
} from '../support/browser.js';
import { startServer, type TestServer } from '../support/server.js';

// The browser editor end to end: real Chromium pages on the bundle `npm run build` wrote,
// against a real server.

/// One editor page in its own browser context, so that it can go offline alone.
interface EditorPage {
  context: BrowserContext;
  page: Page;
  name: string;
}

/// Polls `condition` in Node until it holds; rejects naming `what` after `timeoutMs`.
async function eventually(
  condition: () => Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('browser editor', () => {
  let server: TestServer;
  let browser: Browser;
  const open: EditorPage[] = [];

  before(async () => {
    requireWebBundle();
    server = await startServer();
    browser = await launchChromium();
  });

  after(async () => {
    for (const editor of open) await editor.context.close().catch(() => {});
    await browser?.close();
    await server?.close();
  });

  async function openEditor(docId: string, name: string, color: string): Promise<EditorPage> {
    const { context, page } = await editorPage(browser, name, color);
    const response = await page.goto(`${server.url}/d/${docId}`);
    assert.equal(response?.status(), 200);
    await page.waitForSelector('.ProseMirror[contenteditable="true"]', { timeout: 10_000 });
    await waitStatus(page, 'synced');
    const editor = { context, page, name };
    open.push(editor);
    return editor;
  }

  /// The document a page shows, as JSON text.
  function docOf(page: Page): Promise<string> {
    return page.evaluate(() => JSON.stringify(window.__scriptorium!.client.state!.doc.toJSON()));
  }

  async function serverDoc(docId: string): Promise<string> {
    const response = await fetch(`${server.url}/docs/${docId}`);
    assert.equal(response.status, 200);
    const body = (await response.json()) as { doc: unknown };
    return JSON.stringify(body.doc);
  }

  /// Waits until every page is synced with nothing unsent and shows what the server stores;
  /// returns that document.
  async function converged(docId: string, editors: readonly EditorPage[]): Promise<string> {
    let expected = '';
    await eventually(async () => {
      for (const { page } of editors) {
        const settled = await page.evaluate(
          () =>
            window.__scriptorium!.client.status === 'synced' &&
            !window.__scriptorium!.client.hasUnconfirmed,
        );
        if (!settled) return false;
      }
      expected = await serverDoc(docId);
      for (const { page } of editors) if ((await docOf(page)) !== expected) return false;
      return true;
    }, 'the pages to converge on the server document');
    return expected;
  }

  /// The text a page shows in each element matching `selector` inside the editor, without the
  /// name labels of remote carets.
  function shownText(page: Page, selector: string): Promise<string[]> {
    return page.evaluate((selector) => {
      const copy = document.querySelector('.ProseMirror')!.cloneNode(true) as HTMLElement;
      for (const caret of Array.from(copy.querySelectorAll('.scriptorium-caret'))) caret.remove();
      return Array.from(copy.querySelectorAll(selector), (element) => element.textContent ?? '');
    }, selector);
  }

  function paragraphs(page: Page): Promise<string[]> {
    return shownText(page, ':scope > p');
  }

  /// Puts the caret at the end of the `index`th top-level block, and waits until the editor
  /// holds it there: ProseMirror reads a caret moved by a key on the next selectionchange.
  async function caretAtEnd(page: Page, index: number): Promise<void> {
    await page.locator('.ProseMirror > *').nth(index).click();
    await page.keyboard.press('End');
    await page.waitForFunction((block) => {
      const { doc, selection } = window.__scriptorium!.view!.state;
      let end = 0;
      for (let i = 0; i <= block; i++) end += doc.child(i).nodeSize;
      return selection.empty && selection.head === end - 1;
    }, index);
  }

  async function writeTwoParagraphs(editor: EditorPage): Promise<void> {
    await editor.page.locator('.ProseMirror').click();
    await editor.page.keyboard.type('First line');
    await editor.page.keyboard.press('Enter');
    await editor.page.keyboard.type('Second line');
  }

  it('two pages typing at once, in different and in the same paragraph, converge', async () => {
    const docId = 'browser-typing';
    const ada = await openEditor(docId, 'Ada', '#d7263d');
    const bob = await openEditor(docId, 'Bob', '#2e86ab');
    await writeTwoParagraphs(ada);
    await converged(docId, [ada, bob]);

    await caretAtEnd(ada.page, 0);
    await caretAtEnd(bob.page, 1);
    await Promise.all([
      ada.page.keyboard.type(' from Ada', { delay: 15 }),
      bob.page.keyboard.type(' from Bob', { delay: 15 }),
    ]);
    await converged(docId, [ada, bob]);
    assert.deepEqual(await paragraphs(bob.page), ['First line from Ada', 'Second line from Bob']);

    await caretAtEnd(ada.page, 0);
    await caretAtEnd(bob.page, 0);
    await Promise.all([
      ada.page.keyboard.type(' aaaa', { delay: 15 }),
      bob.page.keyboard.type(' bbbb', { delay: 15 }),
    ]);
    const doc = await converged(docId, [ada, bob]);
    const [first] = await paragraphs(ada.page);
    assert.match(first!, /^First line from Ada/);
    assert.equal(first!.length, 'First line from Ada'.length + 10, 'nobody lost a character');
    assert.equal(
      first!.replace(/[^a]/g, '').length,
      4 + 1,
      "all of Ada's a's (and the one in Ada)",
    );
    assert.equal(first!.replace(/[^b]/g, '').length, 4);
    assert.equal(doc, await docOf(bob.page));
  });

  it("shows each editor's caret and selection to the other at the right place", async () => {
    const docId = 'browser-presence';
    const ada = await openEditor(docId, 'Ada', '#d7263d');
    const bob = await openEditor(docId, 'Bob', '#2e86ab');
    await writeTwoParagraphs(ada);
    await converged(docId, [ada, bob]);
    const adaID = await ada.page.evaluate(() => window.__scriptorium!.client.clientID);

    await caretAtEnd(ada.page, 0);
    const adaHead = await ada.page.evaluate(() => window.__scriptorium!.view!.state.selection.head);
    const caret = bob.page.locator(`.scriptorium-caret[data-client-id="${adaID}"]`);
    await eventually(
      async () =>
        (await caret.count()) === 1 &&
        (await bob.page.evaluate((id) => {
          const element = document.querySelector(`.scriptorium-caret[data-client-id="${id}"]`)!;
          return window.__scriptorium!.view!.posAtDOM(element, 0);
        }, adaID)) === adaHead,
      "Ada's caret at the end of the first paragraph in Bob's page",
    );
    assert.equal(await caret.locator('.scriptorium-caret-label').textContent(), 'Ada');
    // On screen too: right after the paragraph's last character.
    const caretBox = (await caret.boundingBox())!;
    const lineBox = (await bob.page.locator('.ProseMirror > p').first().boundingBox())!;
    assert.ok(caretBox.y >= lineBox.y - 2 && caretBox.y < lineBox.y + lineBox.height);

    // Bob's page lists Ada; Bob types before Ada's caret and it stays after "line".
    await eventually(
      async () => (await bob.page.locator('#people').textContent())!.includes('Ada'),
      'Ada in the list of people on Bob’s page',
    );
    await caretAtEnd(bob.page, 0);
    await bob.page.keyboard.press('Home');
    await bob.page.keyboard.type('>> ');
    await converged(docId, [ada, bob]);
    await eventually(
      async () =>
        (await bob.page.evaluate((id) => {
          const element = document.querySelector(`.scriptorium-caret[data-client-id="${id}"]`)!;
          const view = window.__scriptorium!.view!;
          return view.state.doc.textBetween(0, view.posAtDOM(element, 0));
        }, adaID)) === '>> First line',
      "Ada's caret mapped through Bob's typing",
    );

    // A selection shows as a tinted range with the selected text.
    await ada.page.keyboard.down('Shift');
    for (let i = 0; i < 4; i++) await ada.page.keyboard.press('ArrowLeft');
    await ada.page.keyboard.up('Shift');
    const highlight = bob.page.locator('.scriptorium-selection');
    await eventually(
      async () => (await highlight.allTextContents()).join('') === 'line',
      "Ada's selection highlighted in Bob's page",
    );
    await caretAtEnd(bob.page, 1);
    await ada.page.locator('#people').getByText('Bob').waitFor({ timeout: 5_000 });

    // Evidence for people: both editors side by side, each showing the other's caret.
    const [left, right] = await Promise.all([ada.page.screenshot(), bob.page.screenshot()]);
    const sheet = await browser.newPage({ viewport: { width: 1540, height: 540 } });
    await sheet.setContent(
      '<body style="margin:0;display:flex;gap:20px;background:#888">' +
        `<img src="data:image/png;base64,${left.toString('base64')}">` +
        `<img src="data:image/png;base64,${right.toString('base64')}"></body>`,
    );
    await sheet.waitForFunction(() => Array.from(document.images).every((image) => image.complete));
    await mkdir(artifacts, { recursive: true });
    await writeFile(new URL('two-editors.png', artifacts), await sheet.screenshot());
    await sheet.close();

    // Leaving removes the caret.
    await bob.context.close();
    await eventually(
      async () => (await ada.page.locator('.scriptorium-caret').count()) === 0,
      "Bob's caret to disappear from Ada's page",
    );
  });

  it('a page that goes offline keeps editing and both converge when it comes back', async () => {
    const docId = 'browser-offline';
    const ada = await openEditor(docId, 'Ada', '#d7263d');
    const bob = await openEditor(docId, 'Bob', '#2e86ab');
    await writeTwoParagraphs(ada);
    await converged(docId, [ada, bob]);

    // Offline emulation stops new connections but leaves an open WebSocket alone, so the test
    // also drops the page's transport, as a network failure would.
    await bob.context.setOffline(true);
    await bob.page.evaluate(() => window.__scriptorium!.client.socket.io.engine.close());
    await waitStatus(bob.page, 'offline');

    await caretAtEnd(bob.page, 1);
    await bob.page.keyboard.type(' offline', { delay: 10 });
    await caretAtEnd(ada.page, 0);
    await ada.page.keyboard.type(' online', { delay: 10 });
    await eventually(
      async () => /\d+ unsent changes?/.test((await bob.page.textContent('#status'))!),
      'the status to count unsent changes',
    );
    assert.equal((await serverDoc(docId)).includes('offline'), false, 'nothing sent while offline');

    await bob.context.setOffline(false);
    await converged(docId, [ada, bob]);
    assert.deepEqual(await paragraphs(ada.page), ['First line online', 'Second line offline']);
  });

  it('formatting from the menu reaches the other page, and undo only undoes your own steps', async () => {
    const docId = 'browser-menu';
    const ada = await openEditor(docId, 'Ada', '#d7263d');
    const bob = await openEditor(docId, 'Bob', '#2e86ab');
    await writeTwoParagraphs(ada);
    await converged(docId, [ada, bob]);

    await caretAtEnd(ada.page, 0);
    await ada.page.keyboard.down('Shift');
    for (let i = 0; i < 4; i++) await ada.page.keyboard.press('ArrowLeft');
    await ada.page.keyboard.up('Shift');
    await ada.page.locator('.ProseMirror-menubar [title^="Bold"]').click();
    await converged(docId, [ada, bob]);
    assert.deepEqual(await shownText(bob.page, 'strong'), ['line']);

    await ada.page.locator('.ProseMirror-menubar [title^="Heading 2"]').click();
    await converged(docId, [ada, bob]);
    assert.deepEqual(await shownText(bob.page, ':scope > h2'), ['First line']);

    // Bob types after Ada's changes; Ada undoing takes back her heading, never Bob's words.
    await caretAtEnd(bob.page, 1);
    await bob.page.keyboard.type(' by Bob');
    await converged(docId, [ada, bob]);
    await ada.page.locator('.ProseMirror-menubar [title^="Undo"]').click();
    await converged(docId, [ada, bob]);
    assert.equal(await bob.page.locator('.ProseMirror > h2').count(), 0);
    assert.deepEqual(await paragraphs(bob.page), ['First line', 'Second line by Bob']);
    assert.deepEqual(await shownText(bob.page, 'strong'), ['line']);
  });

  it("keeps a selection change the view has not read yet when another editor's caret is redrawn", async () => {
    // A key moves the selection in the DOM; the view reads it on the next `selectionchange`.
    // A presence redrawn in between wrote the state's older selection back into the DOM, and
    // the key was lost (the likely cause of a failure of the caret test above, seen once).
    const ada = await openEditor('browser-pending-selection', 'Ada', '#d7263d');
    await ada.page.locator('.ProseMirror').click();
    await ada.page.keyboard.type('First line');
    await converged('browser-pending-selection', [ada]);
    for (const withPresence of [false, true]) {
      await caretAtEnd(ada.page, 0);
      const selected = await ada.page.evaluate(async (redraw) => {
        const editor = window.__scriptorium!;
        document.getSelection()!.modify('extend', 'backward', 'character');
        if (redraw) {
          const onPresence = editor.client.socket.listeners('presence')[0]!;
          onPresence({
            clientID: 'zed-1',
            name: 'Zed',
            color: '#112233',
            version: editor.client.version,
            anchor: 1,
            head: 1,
          });
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
        const { doc, selection } = editor.view!.state;
        return doc.textBetween(selection.from, selection.to);
      }, withPresence);
      assert.equal(selected, 'e', withPresence ? 'with a caret redrawn' : 'alone');
    }
  });

  it('an ordered list typed or pasted with a number outside the schema makes one it can hold', async () => {
    // The number became the list's `order` as it was: past 999 999 999 (or not a number, from a
    // pasted `<ol start="x">`) the schema refused it, the page threw and the paste was lost.
    const docId = 'browser-list-order';
    const ada = await openEditor(docId, 'Ada', '#d7263d');
    await ada.page.locator('.ProseMirror').click();
    await ada.page.keyboard.type('12345678901. long');
    await ada.page.keyboard.press('Enter');
    await ada.page.keyboard.press('Enter');
    await ada.page.keyboard.type('7. seven');
    await ada.page.keyboard.press('Enter');
    await ada.page.keyboard.press('Enter');
    for (const start of ['x', '12345678901', '-3', '2.5']) {
      await ada.page.evaluate(
        (start) =>
          window.__scriptorium!.view!.pasteHTML(
            `<ol start="${start}"><li><p>${start}</p></li></ol><p>after</p>`,
          ),
        start,
      );
      // Each list into an empty paragraph of its own, or the next would join this one.
      await ada.page.keyboard.press('Enter');
    }
    const doc = JSON.parse(await converged(docId, [ada])) as {
      content: { type: string; attrs?: { order?: number }; content?: unknown }[];
    };
    const lists = doc.content
      .filter((node) => node.type === 'ordered_list')
      .map((node) => [
        node.attrs?.order,
        JSON.stringify(node.content).match(/"text":"([^"]*)"/)![1],
      ]);
    assert.deepEqual(lists, [
      [7, 'seven'],
      [1, 'x'],
      [999_999_999, '12345678901'],
      [0, '-3'],
      [2, '2.5'],
    ]);
    // A number too long for a list stays text.
    assert.match(JSON.stringify(doc), /12345678901\. long/);
    // The schema, which the server checks every step against, still refuses such an order.
    assert.throws(
      () => schema.nodes['ordered_list']!.create({ order: 12345678901 }),
      /ordered list order/,
    );
  });

  it('explains an address that is not a document, and a new document gets a fresh address', async (t) => {
    const context = await browser.newContext();
    t.after(() => context.close());
    const page = await context.newPage();
    const response = await page.goto(`${server.url}/d/${encodeURIComponent('no spaces!')}`);
    assert.equal(response?.status(), 400);
    assert.equal(await page.textContent('h1'), 'Not a document address');
    await page.goto(`${server.url}/`);
    assert.match(new URL(page.url()).pathname, /^\/d\/[A-Za-z0-9_-]{16}$/);
    await waitStatus(page, 'synced');
  });
});
