import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/// Debian's Chromium, or `CHROMIUM_PATH`.
export const chromiumPath = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';

/// The editor page `npm run build` bundles (`dist/web-bundle/`), which the server serves.
const webBundle = new URL('../../web-bundle/index.html', import.meta.url);

/// Throws unless the web bundle was built: the editor's browser tests need it, and without it
/// the server would answer their pages 404 and the tests would fail on something else.
export function requireWebBundle(): void {
  if (!existsSync(webBundle)) {
    throw new Error('The web bundle is missing: run `npm run build` before the tests.');
  }
}

/// Where browser tests leave screenshots (`test-artifacts/` at the top of the repository).
export const artifacts = new URL('../../../test-artifacts/', import.meta.url);

/// Launches headless Chromium with the flags this machine needs (no sandbox as root, no GPU,
/// and none of the background traffic a closed network refuses). Throws with a clear message
/// when Chromium is missing: the browser tests fail rather than skip, so that CI cannot pass
/// without running them.
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(chromiumPath)) {
    throw new Error(
      `Chromium not found at ${chromiumPath}: install it (apt-get install -y chromium) ` +
        'or set CHROMIUM_PATH. The browser tests do not skip without it.',
    );
  }
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
      '--no-first-run',
    ],
  });
}

/// A page of its own (a fresh context, as another person's browser) that signs in to the web
/// editor as `name` in `color` (the identity it keeps in localStorage), and fails the test when
/// its script throws. Not yet navigated.
export async function editorPage(
  browser: Browser,
  name: string,
  color: string,
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 760, height: 520 } });
  context.setDefaultTimeout(10_000);
  await context.addInitScript(
    (identity) => localStorage.setItem('scriptorium.identity', JSON.stringify(identity)),
    { name, color },
  );
  const page = await context.newPage();
  page.on('pageerror', (err) => {
    throw new Error(`${name}'s page threw: ${err.message}`);
  });
  return { context, page };
}

/// Waits until the web editor's status bar reads `state` (its `data-state`).
export function waitStatus(page: Page, state: string): Promise<unknown> {
  return page.waitForFunction(
    (wanted) => document.getElementById('status')?.dataset['state'] === wanted,
    state,
    { timeout: 10_000 },
  );
}
