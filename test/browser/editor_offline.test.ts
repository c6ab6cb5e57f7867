import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { editorPage, launchChromium, requireWebBundle, waitStatus } from '../support/browser.js';
import { nodeStats } from '../../schema/doc_size.js';
import { openEditor } from '../support/editors.js';
import { startServer, type TestServer } from '../support/server.js';
import { waitFor } from '../support/wait.js';

// The browser editor across a reload of its document (the server's history no longer reaches
// back to what an offline page had), in real Chromium against a real server that keeps only a
// few steps of history.

describe('browser editor offline and reloaded', () => {
  let server: TestServer;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  before(async () => {
    requireWebBundle();
    server = await startServer({ maxHistorySteps: 5 });
    browser = await launchChromium();
  });

  after(async () => {
    for (const context of contexts) await context.close().catch(() => {});
    await browser?.close();
    await server?.close();
  });

  async function openPage(docId: string, name: string, color: string): Promise<Page> {
    const { context, page } = await editorPage(browser, name, color);
    contexts.push(context);
    await page.goto(`${server.url}/d/${docId}`);
    await waitStatus(page, 'synced');
    return page;
  }

  /// Cuts `page` off the server: offline emulation stops new connections but leaves an open
  /// WebSocket alone, so the transport is dropped too, as a network failure would.
  async function goOffline(page: Page): Promise<void> {
    await page.context().setOffline(true);
    await page.evaluate(() => window.__scriptorium!.client.socket.io.engine.close());
    await waitStatus(page, 'offline');
  }

  async function serverText(docId: string): Promise<string> {
    const response = await fetch(`${server.url}/docs/${docId}`);
    const body = (await response.json()) as { doc: unknown };
    return JSON.stringify(body.doc);
  }

  /// Waits until `page` has nothing unsent and the server holds `text`.
  async function serverHas(page: Page, docId: string, text: string): Promise<void> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const settled = await page.evaluate(
        () =>
          window.__scriptorium!.client.status === 'synced' &&
          !window.__scriptorium!.client.hasUnconfirmed,
      );
      if (settled && (await serverText(docId)).includes(text)) return;
      if (Date.now() > deadline) throw new Error(`the server never got ${JSON.stringify(text)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /// Ada types offline while Bob edits past the server's history; Ada comes back, the server
  /// answers her join with the whole document, and her client reloads it.
  async function reloadedWhileAway(docId: string): Promise<{ ada: Page; bob: Page }> {
    const ada = await openPage(docId, 'Ada', '#d7263d');
    const bob = await openPage(docId, 'Bob', '#2e86ab');
    await ada.locator('.ProseMirror').click();
    await ada.keyboard.type('Alpha. ');
    await serverHas(ada, docId, 'Alpha. ');
    await goOffline(ada);
    await ada.keyboard.type('offline words ');
    await bob.locator('.ProseMirror').click();
    await bob.keyboard.press('Control+End');
    await bob.keyboard.type(' bravo bravo bravo');
    await serverHas(bob, docId, 'bravo bravo bravo');
    await ada.context().setOffline(false);
    await serverHas(ada, docId, 'offline words');
    return { ada, bob };
  }

  it('keeps keyboard focus through a reload, and what is typed next reaches the server', async () => {
    const docId = 'offline-focus';
    const { ada } = await reloadedWhileAway(docId);
    assert.equal(await ada.evaluate(() => window.__scriptorium!.view!.hasFocus()), true);
    await ada.keyboard.type('typed after');
    await serverHas(ada, docId, 'typed after');
    // Where the caret was: after the offline words, before Bob's.
    assert.match(await serverText(docId), /offline words typed after/);
  });

  it('lists the others after a reload, as it draws their carets', async () => {
    const docId = 'offline-people';
    const ada = await openPage(docId, 'Ada', '#d7263d');
    const bob = await openPage(docId, 'Bob', '#2e86ab');
    await bob.locator('.ProseMirror').click();
    await bob.keyboard.type('Bob was here.');
    await serverHas(bob, docId, 'Bob was here.');
    const bobID = await bob.evaluate(() => window.__scriptorium!.client.clientID);
    const caret = ada.locator(`.scriptorium-caret[data-client-id="${bobID}"]`);
    await caret.waitFor();
    await ada.locator('#people li', { hasText: 'Bob' }).waitFor();

    // Reload Ada's document while connected, as the client does when the server answers a
    // batch with `history-gone` (through its private `pull`: a server cannot be made to give
    // that answer on cue), and wait for it to be shown with Bob's caret moved into it.
    await ada.evaluate(async () => {
      const client = window.__scriptorium!.client as unknown as {
        state: unknown;
        pull(full: boolean): void;
      };
      const before = client.state;
      client.pull(true);
      while (client.state === before) await new Promise((resolve) => setTimeout(resolve, 10));
    });
    await caret.waitFor();
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(await ada.locator('#people li').allTextContents(), ['Ada (you)', 'Bob']);
  });

  it('asks before the tab closes with changes the server has not confirmed, and only then', async () => {
    const docId = 'offline-unload';
    const ada = await openPage(docId, 'Ada', '#d7263d');
    const dialogs: string[] = [];
    ada.on('dialog', (dialog) => {
      dialogs.push(dialog.type());
      // Stay on the page: the changes are still to be sent.
      void dialog.dismiss();
    });
    await ada.locator('.ProseMirror').click();
    await ada.keyboard.type('Saved. ');
    await serverHas(ada, docId, 'Saved. ');
    await goOffline(ada);
    await ada.keyboard.type('An hour of offline work.');

    await ada.close({ runBeforeUnload: true });
    const deadline = Date.now() + 5_000;
    while (dialogs.length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.deepEqual(dialogs, ['beforeunload']);
    assert.equal(ada.isClosed(), false, 'the page stayed open');

    // Back online, the work is sent, and the tab closes without asking.
    await ada.context().setOffline(false);
    await serverHas(ada, docId, 'An hour of offline work.');
    await ada.close({ runBeforeUnload: true });
    await ada.waitForEvent('close');
    assert.deepEqual(dialogs, ['beforeunload']);
  });
});

describe('browser editor offline in a full document', () => {
  it('says in one notice how many keys typed offline the full document could not take, and blames no later reload on it', async (t) => {
    // The document is at MAX_DOC_BYTES: none of the keys fits. The page once showed a notice
    // per key, each over the one before ("1 change could not be kept … Step 0 would make …").
    requireWebBundle();
    // A short history, for the reload at the end.
    const server = await startServer({ maxDocBytes: 4096, maxHistorySteps: 2 });
    const browser = await launchChromium();
    const docId = 'offline-full';
    let other: ReturnType<typeof openEditor> | null = null;
    const filler = openEditor(server.url, docId);
    t.after(async () => {
      other?.close();
      filler.close();
      await browser.close();
      await server.close();
    });
    await waitFor(() => filler.status === 'synced', 'the filler to join');
    const { schema } = filler.state!;
    const oneKey = schema.node('doc', null, [schema.node('paragraph', null, [schema.text('x')])]);
    filler.dispatch(filler.state!.tr.insertText('x'.repeat(4096 - nodeStats(oneKey).bytes + 1), 1));
    await waitFor(() => filler.status === 'synced' && !filler.hasUnconfirmed, 'filled');
    filler.close();

    const { context, page } = await editorPage(browser, 'Ada', '#d7263d');
    await page.goto(`${server.url}/d/${docId}`);
    await waitStatus(page, 'synced');
    await page.locator('.ProseMirror').click();
    await page.keyboard.press('Control+End');
    await context.setOffline(true);
    await page.evaluate(() => window.__scriptorium!.client.socket.io.engine.close());
    await waitStatus(page, 'offline');
    await page.keyboard.type('abcdefghij'.repeat(3));
    await context.setOffline(false);
    await page.waitForFunction(
      () =>
        window.__scriptorium!.client.status === 'synced' &&
        !window.__scriptorium!.client.hasUnconfirmed,
    );
    const notice = page.locator('#notice');
    assert.equal(await notice.isVisible(), true);
    assert.match(
      (await notice.textContent()) ?? '',
      /^30 changes could not be kept \(the server refused local steps\): they would make the document larger than 4096 bytes or \d+ positions\.$/,
    );

    // A later reload for another reason is not blamed on that refusal: offline, a key typed
    // into text another editor deletes, then more steps than the server's history keeps.
    other = openEditor(server.url, docId);
    await waitFor(() => other!.status === 'synced', 'the other editor to join');
    await context.setOffline(true);
    await page.evaluate(() => window.__scriptorium!.client.socket.io.engine.close());
    await waitStatus(page, 'offline');
    await page.evaluate(() => {
      const client = window.__scriptorium!.client;
      client.dispatch(client.state!.tr.insertText('Z', 50));
    });
    other.dispatch(other.state!.tr.delete(1, other.state!.doc.firstChild!.nodeSize - 1));
    for (let i = 0; i < 4; i++) other.dispatch(other.state!.tr.insertText('q', 1));
    await waitFor(() => other!.status === 'synced' && !other!.hasUnconfirmed, 'deleted');
    await context.setOffline(false);
    await page.waitForFunction(
      () =>
        window.__scriptorium!.client.status === 'synced' &&
        !window.__scriptorium!.client.hasUnconfirmed,
    );
    await page.waitForFunction(
      () =>
        document.querySelector('#notice')?.textContent !== '' &&
        !document.querySelector('#notice')?.textContent?.startsWith('30'),
    );
    assert.equal(
      await notice.textContent(),
      '1 change could not be kept (the server no longer held the steps to catch up).',
    );
    await context.close();
  });
});
