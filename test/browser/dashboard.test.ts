import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
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

  it('plots the closed windows as line charts', async () => {
    const socket = rawSocket(server.url, 'dash', 'd');
    const emit = (event: string, payload: unknown) => ask<{ ok: boolean }>(socket, event, payload);
    try {
      await emit('join', {});
      let doc = emptyDoc();
      let version = 0;
      // Four windows of real steps messages, more in each.
      for (let window = 1; window <= 4; window++) {
        for (let i = 0; i < window * 5; i++) {
          const tr = EditorState.create({ doc }).tr.insertText('x', 1);
          assert.equal(
            (await emit('steps', { version, steps: tr.steps.map((s) => s.toJSON()) })).ok,
            true,
          );
          doc = tr.doc;
          version++;
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
    // The p99 series is drawn in #c92a2a: find its pixels on the latency canvas, and the
    // accepted-batches series (#1c7ed6) on the throughput canvas.
    const drawn = await page.evaluate(() => {
      const has = (id: string, [r, g, b]: number[]) => {
        const canvas = document.getElementById(id) as HTMLCanvasElement;
        const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
        let count = 0;
        for (let i = 0; i < data.length; i += 4) {
          if (
            Math.abs(data[i]! - r!) < 8 &&
            Math.abs(data[i + 1]! - g!) < 8 &&
            Math.abs(data[i + 2]! - b!) < 8
          )
            count++;
        }
        return count;
      };
      return {
        p99: has('chart-latency', [0xc9, 0x2a, 0x2a]),
        rps: has('chart-rps', [0x1c, 0x7e, 0xd6]),
      };
    });
    assert.ok(drawn.p99 > 20, `the p99 line is drawn (${drawn.p99} pixels)`);
    assert.ok(drawn.rps > 20, `the throughput line is drawn (${drawn.rps} pixels)`);
    await mkdir(artifacts, { recursive: true });
    await page.screenshot({ path: new URL('dashboard.png', artifacts).pathname, fullPage: true });
    await page.close();
  });
});

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
