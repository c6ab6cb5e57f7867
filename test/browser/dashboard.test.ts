import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { EditorState } from 'prosemirror-state';
import { emptyDoc } from '../../schema/index.js';
import { artifacts, launchChromium } from '../support/browser.js';
import { startServer, startServerWithFakeClock } from '../support/server.js';
import { ask, rawSocket } from '../support/socket.js';

describe('the dashboard in a browser', () => {
  let server: Awaited<ReturnType<typeof startServerWithFakeClock>>;
  let browser: Browser;

  before(async () => {
    // A fake clock, so that windows close when the test says and not every 10 s.
    server = await startServerWithFakeClock(Date.now() - (Date.now() % 10_000) - 60_000);
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  it('draws no series line before any window closes', async () => {
    // The baseline for the next test: the legend's swatches are in the series' colours too,
    // and must not pass for a line.
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction(() =>
      /No closed window/.test(document.getElementById('status')!.textContent ?? ''),
    );
    assert.deepEqual(await seriesPixels(page), { p99: 0, rps: 0 });
    await page.close();
  });

  it('plots the closed windows as line charts', async () => {
    const socket = rawSocket(server.url, 'dash', 'd');
    const emit = (event: string, payload: unknown) => ask<{ ok: boolean }>(socket, event, payload);
    try {
      await emit('join', {});
      let doc = emptyDoc();
      let version = 0;
      // Four windows of real steps messages, more in each. Two steps a batch and a few stale
      // batches, so that the accepted-batches line lies under neither the steps line nor the
      // received-batches line, which are drawn after it.
      for (let window = 1; window <= 4; window++) {
        for (let i = 0; i < window * 5; i++) {
          const tr = EditorState.create({ doc }).tr.insertText('x', 1).insertText('y', 1);
          assert.equal(
            (await emit('steps', { version, steps: tr.steps.map((s) => s.toJSON()) })).ok,
            true,
          );
          doc = tr.doc;
          version += 2;
        }
        const stale = EditorState.create({ doc: emptyDoc() }).tr.insertText('z', 1);
        for (let i = 0; i < window * 3; i++) {
          await emit('steps', { version: 0, steps: stale.steps.map((s) => s.toJSON()) });
        }
        server.advance(10_000);
      }
    } finally {
      socket.close();
    }

    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction(
      () => !/Loading/.test(document.getElementById('status')!.textContent ?? ''),
    );
    assert.doesNotMatch((await page.textContent('#status')) ?? '', /failed/i);
    const drawn = await seriesPixels(page);
    assert.ok(drawn.p99 > 20, `the p99 line is drawn (${drawn.p99} pixels)`);
    assert.ok(drawn.rps > 20, `the throughput line is drawn (${drawn.rps} pixels)`);
    await mkdir(artifacts, { recursive: true });
    await page.screenshot({ path: new URL('dashboard.png', artifacts).pathname, fullPage: true });
    await page.close();
  });
});

/// Pixels of the p99 series (#c92a2a) on the latency canvas and of the accepted-batches
/// series (#1c7ed6) on the throughput canvas, counted inside the plot area only: the legend
/// above it has a swatch of each colour.
function seriesPixels(page: Page): Promise<{ p99: number; rps: number }> {
  return page.evaluate(() => {
    const count = (id: string, [r, g, b]: number[]) => {
      const canvas = document.getElementById(id) as HTMLCanvasElement;
      // The plot area as the dashboard's draw() lays it out, in CSS pixels.
      const ratio = canvas.width / canvas.clientWidth;
      const left = Math.floor(48 * ratio);
      const top = Math.floor(20 * ratio);
      const right = Math.ceil((canvas.clientWidth - 8) * ratio);
      const bottom = Math.ceil((canvas.clientHeight - 22) * ratio);
      const data = canvas
        .getContext('2d')!
        .getImageData(left, top, right - left, bottom - top).data;
      let pixels = 0;
      for (let i = 0; i < data.length; i += 4) {
        if (
          Math.abs(data[i]! - r!) < 8 &&
          Math.abs(data[i + 1]! - g!) < 8 &&
          Math.abs(data[i + 2]! - b!) < 8
        )
          pixels++;
      }
      return pixels;
    };
    return {
      p99: count('chart-latency', [0xc9, 0x2a, 0x2a]),
      rps: count('chart-rps', [0x1c, 0x7e, 0xd6]),
    };
  });
}

describe('the dashboard with a metrics token', () => {
  // What `openssl rand -base64` (and Render's generateValue) gives: '+', '/' and '=' in it.
  // URLSearchParams would read the '+' as a space and the server would answer 401.
  const metricsToken = 'q+7Lk/2Zx+Wm9/Tr4+Vb==';
  let server: Awaited<ReturnType<typeof startServer>>;
  let browser: Browser;

  before(async () => {
    server = await startServer({ metricsToken });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  for (const [how, fragment] of [
    ['as it is', metricsToken],
    ['percent-encoded', encodeURIComponent(metricsToken)],
  ]) {
    it(`polls with a base64 token given ${how}`, async () => {
      const page = await browser.newPage();
      await page.goto(`${server.url}/dashboard#token=${fragment}`);
      await page.waitForFunction(
        () => !/Loading/.test(document.getElementById('status')!.textContent ?? ''),
      );
      assert.doesNotMatch((await page.textContent('#status')) ?? '', /failed/i);
      await page.close();
    });
  }
});
