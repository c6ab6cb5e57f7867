import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { signToken } from '../../server/protocol/auth.js';
import {
  artifacts,
  editorPage,
  launchChromium,
  requireWebBundle,
  waitStatus,
} from '../support/browser.js';
import { startServer, type TestServer } from '../support/server.js';

// The web editor's History panel in real Chromium, two users with tokens against a real
// server: the timeline names both, a selected session shows its insertions in the author's
// presence colour and its deletions struck through, and naming, restoring and reverting one
// author reach both editors.

const secret = 'history-browser-secret-long-enough-0123456789';
const docId = 'history-panel';
/// Longer than the panel's shortest grouping (2 s), so that each burst is a session of its own.
const pauseMs = 3_000;

describe('History panel, in a browser', () => {
  let server: TestServer;
  let browser: Browser;

  before(async () => {
    requireWebBundle();
    server = await startServer({ authSecret: secret });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  async function open(
    user: string,
    name: string,
    color: string,
    access: 'read' | 'write' = 'write',
  ): Promise<Page> {
    const token = await signToken(secret, { user, doc: docId, access, ttlSeconds: 600 });
    const { context, page } = await editorPage(browser, name, color);
    // The panel's colours go through the CSSOM: the page's policy must refuse none of them.
    await context.addInitScript(() => {
      const seen: string[] = [];
      (window as unknown as { __violations: string[] }).__violations = seen;
      document.addEventListener('securitypolicyviolation', (event) =>
        seen.push(`${event.effectiveDirective} ${event.blockedURI}`),
      );
    });
    await page.goto(`${server.url}/d/${docId}#token=${token}`);
    await page.waitForSelector('.ProseMirror[contenteditable="true"]');
    await waitStatus(page, 'synced');
    return page;
  }

  async function typeAtEnd(page: Page, text: string): Promise<void> {
    await page.click('#editor .ProseMirror');
    await page.keyboard.press('Control+End');
    await page.keyboard.type(text);
    await waitStatus(page, 'synced');
  }

  function liveText(page: Page): Promise<string> {
    return page.evaluate(() => window.__scriptorium!.view!.state.doc.textContent);
  }

  async function waitText(page: Page, text: string): Promise<void> {
    await page.waitForFunction(
      (wanted) => window.__scriptorium?.view?.state.doc.textContent === wanted,
      text,
    );
  }

  /// The users each timeline entry names, newest entry first.
  function timeline(page: Page): Promise<string[][]> {
    return page.$$eval('.history-entry', (entries) =>
      entries.map((entry) =>
        Array.from(entry.querySelectorAll('.history-user'), (user) => user.textContent ?? ''),
      ),
    );
  }

  it('shows who wrote what, names, reverts one author and restores, for both editors', async () => {
    const ann = await open('ann', 'Ann', '#d7263d');
    const bob = await open('bob', 'Bob', '#2e86ab');
    await typeAtEnd(ann, 'Ann one. ');
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
    await typeAtEnd(bob, 'Bob two. ');
    await waitText(ann, 'Ann one. Bob two. ');
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
    await typeAtEnd(ann, 'Ann three.');
    await waitText(bob, 'Ann one. Bob two. Ann three.');

    // One session by default (pauses under 5 minutes), naming both; then one per burst.
    await ann.click('#history-toggle');
    await ann.waitForSelector('.history-entry');
    assert.equal(await ann.isVisible('#editor'), false, 'the live editor makes way');
    assert.deepEqual(await timeline(ann), [['ann', 'bob']]);
    await ann.selectOption('#history-gap', '2000');
    await ann.waitForFunction(() => document.querySelectorAll('.history-entry').length === 3);
    assert.deepEqual(await timeline(ann), [['ann'], ['bob'], ['ann']]);

    // Bob's session: his version, read-only, his insertion in his presence colour.
    await ann.click('.history-entry >> nth=1');
    await ann.waitForSelector('#history-doc .history-inserted');
    assert.equal(await ann.textContent('#history-doc .ProseMirror'), 'Ann one. Bob two. ');
    assert.equal(await ann.getAttribute('#history-doc .ProseMirror', 'contenteditable'), 'false');
    const inserted = await ann.$$eval('#history-doc .history-inserted', (spans) =>
      spans.map((span) => ({
        text: span.textContent,
        user: (span as HTMLElement).dataset['user'],
        colour: getComputedStyle(span).borderBottomColor,
      })),
    );
    assert.equal(inserted.map((span) => span.text).join(''), 'Bob two. ');
    assert.ok(inserted.every((span) => span.user === 'bob' && span.colour === 'rgb(46, 134, 171)'));

    // Name it: the timeline marks it.
    await ann.fill('#history-name-input', 'Draft');
    await ann.click('#history-name');
    await ann.waitForSelector('.history-entry >> nth=1 >> .history-named:has-text("Draft")');

    // Revert Bob's changes in his session: gone from both editors, Ann's kept. (After a
    // pause, so that the revert is a session of its own.)
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
    assert.deepEqual(
      await ann.$$eval('#history-revert-user option', (options) =>
        options.map((option) => option.textContent),
      ),
      ['bob'],
    );
    await ann.click('#history-revert');
    await ann.waitForSelector('#history-message:has-text("Reverted")');
    await waitText(bob, 'Ann one. Ann three.');
    await waitText(ann, 'Ann one. Ann three.');

    // The revert is the newest session: Bob's words struck through where they were.
    await ann.waitForFunction(() => document.querySelectorAll('.history-entry').length === 4);
    await ann.click('.history-entry >> nth=0');
    await ann.waitForSelector('#history-doc .history-deleted');
    assert.equal(await ann.textContent('#history-doc .history-deleted'), 'Bob two. ');

    // Restore the named version: both editors show it.
    await ann.click('.history-entry:has(.history-named)');
    await ann.waitForFunction(
      () =>
        document.querySelector('#history-doc .ProseMirror')?.textContent === 'Ann one. Bob two. ',
    );
    await ann.click('#history-restore');
    await ann.waitForSelector('#history-message:has-text("Restored")');
    await waitText(bob, 'Ann one. Bob two. ');
    await waitText(ann, 'Ann one. Bob two. ');
    await mkdir(artifacts, { recursive: true });
    await ann.screenshot({ path: new URL('history-panel.png', artifacts).pathname });

    // Closing the panel brings the live editor back, at the restored version.
    await ann.click('#history-toggle');
    await ann.waitForSelector('#editor .ProseMirror', { state: 'visible' });
    assert.equal(await liveText(ann), 'Ann one. Bob two. ');
    assert.equal(await liveText(bob), 'Ann one. Bob two. ');
    assert.deepEqual(
      await ann.evaluate(() => (window as unknown as { __violations: string[] }).__violations),
      [],
    );
  });

  it('shows a reader the history, and says so when a restore is refused', async () => {
    // After the first test: the document holds its sessions.
    const reader = await open('cara', 'Cara', '#3a7d44', 'read');
    const before = await liveText(reader);
    await reader.click('#history-toggle');
    await reader.click('.history-entry >> nth=-1');
    await reader.waitForSelector('#history-doc .ProseMirror');
    await reader.click('#history-restore');
    await reader.waitForSelector('#history-message:has-text("read access only")');
    await reader.click('#history-toggle');
    assert.equal(await liveText(reader), before);
  });
});
