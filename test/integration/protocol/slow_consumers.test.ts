import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import type { Socket } from 'socket.io-client';
import { WebSocket } from 'ws';
import { emptyDoc, schema } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { startServerProcess, type ServerProcess } from '../../support/process.js';
import { startServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

// 100 sockets that ask for the whole document again and again and never read the answers,
// while 10 editors type: the server must drop the readers that do not read before their
// answers pile up in its memory, and the editors must not notice (none dropped, every edit
// answered).

const slowCount = 100;
const editorCount = 10;
const docId = 'slow-consumers';

/// The server's resident set in MiB, from /proc.
function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/// A client that speaks Engine.IO and Socket.io by hand, joins, asks for `pulls` whole
/// documents and stops reading its socket. Resolves once its requests are sent.
async function slowReader(wsUrl: string, index: number, pulls: number): Promise<WebSocket> {
  const ws = new WebSocket(`${wsUrl}/socket.io/?EIO=4&transport=websocket&doc=${docId}`);
  await new Promise<void>((resolve, reject) => {
    ws.on('message', (data: Buffer) => {
      const text = data.toString();
      if (text.startsWith('0')) ws.send(`40{"clientID":"slow-${index}"}`);
      else if (text.startsWith('40')) ws.send('420["join",{}]');
      else if (text.startsWith('430')) resolve();
      else if (text === '2') ws.send('3');
    });
    ws.on('error', reject);
  });
  for (let i = 0; i < pulls; i++) ws.send(`42${i + 1}["pull",{}]`);
  // Stop reading: the kernel's buffers fill, then the server's.
  (ws as unknown as { _socket: { pause(): void } })._socket.pause();
  return ws;
}

/// 10 editors each send a one-step batch every 100 ms for `ms`; resolves with every
/// edit-to-acknowledgement time in ms, and fails if an editor was refused other than as 'stale',
/// got no answer, or was disconnected.
async function type(url: string, ms: number, round: number): Promise<number[]> {
  const sockets: Socket[] = [];
  const latencies: number[] = [];
  try {
    for (let e = 0; e < editorCount; e++) {
      const socket = rawSocket(url, docId, `editor-${round}-${e}`);
      sockets.push(socket);
      socket.on('steps', () => {});
    }
    const versions = await Promise.all(
      sockets.map(async (socket) => {
        const answer = await ask<SyncAnswer>(socket, 'join', { version: 0 });
        assert.ok(answer.ok);
        return answer.version;
      }),
    );
    const step = EditorState.create({ doc: emptyDoc() }).tr.insertText('k', 1).steps[0]!.toJSON();
    const end = Date.now() + ms;
    await Promise.all(
      sockets.map(async (socket, e) => {
        while (Date.now() < end) {
          const started = performance.now();
          // Made at the editor's last known version: the server rebases it over the others.
          const answer = await ask<StepsAnswer>(socket, 'steps', {
            version: versions[e],
            steps: [step],
          });
          latencies.push(performance.now() - started);
          if (answer.ok) versions[e] = answer.version;
          else assert.equal(answer.code, 'stale', answer.message);
          await delay(100);
        }
        assert.ok(socket.connected, `editor ${e} stayed connected`);
      }),
    );
  } finally {
    for (const socket of sockets) socket.close();
  }
  return latencies;
}

function p99(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

describe('slow consumers', () => {
  let server: ServerProcess;

  before(async () => {
    server = await startServerProcess({
      STORE: 'memory',
      REDIS_URL: '',
      LOG_LEVEL: 'warn',
      MAX_DOC_BYTES: String(512 * 1024),
      MAX_MESSAGE_BYTES: String(256 * 1024),
      MAX_SOCKET_BUFFER_BYTES: String(1024 * 1024),
      // Enough requests at once to fill the kernel's socket buffers (several MB each way on
      // loopback) and then the server's.
      PULLS_BURST: '60',
    });
    // A document of about 400 KB in 400 paragraphs after a short first one: every answer to a
    // pull is that big, and the editors' steps touch only the first paragraph.
    const writer = rawSocket(server.url, docId, 'writer');
    try {
      const joined = await ask<SyncAnswer>(writer, 'join', {});
      assert.ok(joined.ok);
      let version = joined.version;
      let doc = emptyDoc();
      for (let i = 0; i < 4; i++) {
        const paragraphs = Array.from({ length: 100 }, () =>
          schema.node('paragraph', null, [schema.text('lorem ipsum '.repeat(80))]),
        );
        const tr = EditorState.create({ doc }).tr.insert(doc.content.size, paragraphs);
        const steps = tr.steps.map((step) => step.toJSON());
        const answer = await ask<StepsAnswer>(writer, 'steps', { version, steps });
        assert.ok(answer.ok, !answer.ok ? answer.message : '');
        version = answer.version;
        doc = tr.doc;
      }
    } finally {
      writer.close();
    }
  });

  after(async () => {
    await server?.stop();
  });

  it('drops 100 readers that never read, keeps RSS bounded and editors unaffected', async () => {
    const pid = server.child.pid!;
    const baseline = await type(server.url, 4000, 0);
    const rssBefore = rssMiB(pid);

    const wsUrl = server.url.replace('http', 'ws');
    const readers = await Promise.all(
      Array.from({ length: slowCount }, (_, i) => slowReader(wsUrl, i, 59)),
    );
    let peak = rssBefore;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMiB(pid))), 100);
    const loaded = await type(server.url, 6000, 1);
    // Every reader that stopped reading was dropped. Their end never sees the server close
    // (it does not read), so ask the server how many sockets it still holds: the editors have
    // left, the readers must be gone too.
    let held = -1;
    for (let i = 0; i < 100 && held !== 0; i++) {
      const health = (await (await fetch(`${server.url}/healthz`)).json()) as { sockets: number };
      held = health.sockets;
      if (held !== 0) await delay(100);
    }
    const dropped = held === 0;
    clearInterval(sampler);
    for (const ws of readers) ws.terminate();
    const after = await type(server.url, 4000, 2);

    console.log(
      `slow consumers: RSS ${rssBefore.toFixed(0)} → peak ${peak.toFixed(0)} MiB; editors' p99 ` +
        `${p99(baseline).toFixed(1)} / ${p99(loaded).toFixed(1)} / ${p99(after).toFixed(1)} ms ` +
        `(before / with / after the slow readers), ${loaded.length} edits with them`,
    );
    assert.ok(dropped, `every slow reader was disconnected (${held} sockets left)`);
    // Without the cap each reader would hold 59 answers of ~400 KB beyond the kernel's
    // buffers: about 100 × (24 MB − ~10 MB) ≈ 1.4 GB. With it, at most ~1 MiB each.
    assert.ok(peak - rssBefore < 200, `RSS grew ${(peak - rssBefore).toFixed(0)} MiB`);
    // Editors unaffected, as behaviour: none of them was disconnected and every edit they sent
    // while the readers were stuck was answered (`type` fails on a refusal other than 'stale'
    // and `ask` on an answer that never comes). Their latency is printed above, not asserted: a
    // timing bound here failed on a busier CI machine (26 against 12 ms) with nothing wrong.
    // Starved editors would answer a few edits in 6 s; they answer ~60 each on a quiet machine.
    assert.ok(loaded.length >= editorCount * 5, `${loaded.length} edits answered in 6 s`);
    const probe = rawSocket(server.url, docId, 'probe');
    assert.ok((await ask<SyncAnswer>(probe, 'join', {})).ok, 'the server still serves');
    probe.close();
  });
});

describe('a long-polling reader that stops polling', () => {
  it('is dropped once what waits for it passes the limit, counted across sweeps as it grows', async (t) => {
    // A polling client keeps its session alive with pongs but never asks for what it is sent:
    // every broadcast waits in engine.io's queue for it. Counted incrementally (each packet
    // once, as the queue grows between sweeps), the queue must still be seen for what it is.
    const server = await startServer({
      maxDocBytes: 64 * 1024,
      maxSocketBufferBytes: 64 * 1024,
      batchesPerSecond: 0,
    });
    const base = `${server.url}/socket.io/?EIO=4&transport=polling&doc=polled`;
    const opened = await (await fetch(base)).text();
    const sid = (JSON.parse(opened.slice(1)) as { sid: string }).sid;
    const url = `${base}&sid=${sid}`;
    let pong: NodeJS.Timeout | undefined;
    const writer = rawSocket(server.url, 'polled', 'writer');
    t.after(async () => {
      clearInterval(pong);
      writer.close();
      await server.close();
    });
    await fetch(url, { method: 'POST', body: '40{"clientID":"poller"}' });
    assert.match(await (await fetch(url)).text(), /^40/);
    await fetch(url, { method: 'POST', body: '420["join",{}]' });
    assert.match(await (await fetch(url)).text(), /^430/);
    pong = setInterval(() => void fetch(url, { method: 'POST', body: '3' }).catch(() => {}), 200);
    const poller = () =>
      [...server.server.io.of('/').sockets.values()].find(
        (socket) => socket.data.clientID === 'poller',
      );
    assert.ok(poller()?.connected);
    const joined = await ask<SyncAnswer>(writer, 'join', {});
    assert.ok(joined.ok);
    let version = joined.version;
    const step = EditorState.create({ doc: emptyDoc() })
      .tr.insertText('x'.repeat(200), 1)
      .steps[0]!.toJSON();
    // ~300 bytes a broadcast, sent over more than a second: the queue grows over several
    // sweeps (every 250 ms) before it passes 64 KiB.
    for (let i = 0; i < 400 && poller(); i++) {
      const answer = await ask<StepsAnswer>(writer, 'steps', { version, steps: [step] });
      assert.ok(answer.ok, !answer.ok ? answer.message : '');
      version = answer.version;
      await delay(4);
    }
    await waitFor(() => !poller(), 'the poller to be dropped');
    assert.ok(writer.connected, 'the writer stays');
  });
});
