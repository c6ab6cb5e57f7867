import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { startServer, type TestServer } from '../support/server.js';

declare global {
  interface Window {
    __violations: string[];
    __ran?: boolean;
  }
}

// The Content-Security-Policy in force in a real browser: the editor and the dashboard work
// under it, and script that finds its way into a page does not run.
describe('Content-Security-Policy in Chromium', () => {
  let server: TestServer;
  let browser: Browser;

  before(async () => {
    server = await startServer();
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await server?.close();
  });

  async function openPage(path: string): Promise<Page> {
    const context = await browser.newContext();
    context.setDefaultTimeout(10_000);
    // Recorded from the first script on, before any of the page's own.
    await context.addInitScript(() => {
      window.__violations = [];
      document.addEventListener('securitypolicyviolation', (event) => {
        window.__violations.push(`${event.violatedDirective} ${event.blockedURI}`);
      });
    });
    const page = await context.newPage();
    await page.goto(server.url + path);
    return page;
  }

  it('lets the editor load, connect and edit with no violation', async () => {
    const page = await openPage('/d/csp-editor');
    await page.waitForFunction(() => document.querySelector('.ProseMirror') !== null);
    await page.locator('.ProseMirror').click();
    await page.keyboard.type('Under a strict policy');
    await page.waitForFunction(async () => {
      const response = await fetch('/docs/csp-editor');
      if (!response.ok) return false;
      return JSON.stringify(await response.json()).includes('Under a strict policy');
    });
    assert.deepEqual(await page.evaluate(() => window.__violations), []);
    await page.context().close();
  });

  it('lets the dashboard run its script with no violation', async () => {
    const page = await openPage('/dashboard');
    await page.waitForFunction(() => document.getElementById('status')?.textContent !== '');
    assert.deepEqual(await page.evaluate(() => window.__violations), []);
    await page.context().close();
  });

  it('does not run script injected into the page, and reports it', async () => {
    const page = await openPage('/d/csp-injected');
    await page.waitForFunction(() => document.querySelector('.ProseMirror') !== null);
    await page.evaluate(() => {
      // What stored HTML would do if it ever reached the DOM: an inline handler, an inline
      // script element, and a javascript: link followed.
      document.body.insertAdjacentHTML(
        'beforeend',
        '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" onload="window.__ran = true">',
      );
      const script = document.createElement('script');
      script.textContent = 'window.__ran = true';
      document.body.append(script);
      const link = document.createElement('a');
      link.href = 'javascript:window.__ran = true';
      document.body.append(link);
      link.click();
    });
    await page.waitForFunction(() => window.__violations.length >= 3);
    assert.equal(await page.evaluate(() => window.__ran === true), false, 'no injected script ran');
    const violations = await page.evaluate(() => window.__violations);
    assert.ok(
      violations.every((v) => v.startsWith('script-src')),
      violations.join(', '),
    );
    await page.context().close();
  });
});
