import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { freePortRange } from '../support/redis_process.js';
import { deleteRedisKeys, redisForTests } from '../support/store_fixtures.js';
import { waitFor } from '../support/wait.js';

// The deployment the README offers for more than one core, as its users meet it: real Chromium
// pages served through the nginx gateway of `npm run cluster`, their sockets opened through it
// too (the nodes check each page's Origin against the Host the gateway passes on), editing one
// document together.

const clusterEntry = fileURLToPath(new URL('../../deploy/cluster.js', import.meta.url));
const { redisUrl, keyPrefix } = redisForTests();

describe('the browser editor through the gateway', () => {
  let cluster: ChildProcess;
  let gateway: string;
  let browser: Browser;

  before(async () => {
    const port = await freePortRange(3);
    cluster = spawn(
      process.execPath,
      [clusterEntry, '--nodes', '2', '--port', String(port), '--base-port', String(port + 1)],
      {
        env: {
          ...process.env,
          REDIS_URL: redisUrl,
          REDIS_KEY_PREFIX: keyPrefix,
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const lines: string[] = [];
    createInterface({ input: cluster.stdout! }).on('line', (line) => lines.push(line));
    await waitFor(() => lines.some((line) => line.startsWith('gateway ')), 'the gateway', 30_000);
    gateway = lines.find((line) => line.startsWith('gateway '))!.slice('gateway '.length);
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    if (cluster && cluster.exitCode === null) {
      const exited = once(cluster, 'exit');
      cluster.kill('SIGTERM');
      await exited;
    }
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  async function open(docId: string): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 760, height: 520 } });
    context.setDefaultTimeout(15_000);
    const page = await context.newPage();
    page.on('pageerror', (err) => {
      throw new Error(`the page threw: ${err.message}`);
    });
    const response = await page.goto(`${gateway}/d/${docId}`);
    assert.equal(response?.status(), 200);
    await page.waitForFunction(
      () => document.getElementById('status')?.dataset['state'] === 'synced',
    );
    return page;
  }

  it(
    'two pages opened through the gateway edit one document together',
    { timeout: 60_000 },
    async () => {
      const docId = `through-the-gateway-${randomUUID().slice(0, 8)}`;
      const ada = await open(docId);
      const bob = await open(docId);
      await ada.click('.ProseMirror');
      await ada.keyboard.type('Hello through nginx');
      await bob.waitForFunction(() =>
        document.querySelector('.ProseMirror')?.textContent?.includes('Hello through nginx'),
      );
      // The stored document, as the gateway routes it: from the node that serves it.
      let stored = '';
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        const response = await fetch(`${gateway}/docs/${docId}`);
        stored = JSON.stringify(((await response.json()) as { doc?: unknown }).doc ?? null);
        if (stored.includes('Hello through nginx')) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.match(stored, /Hello through nginx/);
      await ada.context().close();
      await bob.context().close();
    },
  );
});
