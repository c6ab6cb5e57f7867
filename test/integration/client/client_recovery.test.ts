import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { Server } from 'socket.io';
import { CollabClient } from '../../../client/index.js';
import { createCollab, MemoryStore, type Authenticate } from '../../../server/index.js';
import type { AppendOutcome, AppendRequest } from '../../../server/stores/store.js';
import { openEditor } from '../../support/editors.js';
import { startServer } from '../../support/server.js';
import { delay, waitFor } from '../../support/wait.js';

// How the client library recovers when the server keeps refusing or sending it away, and what
// it does with edits made from inside its own callbacks. Real server, real sockets.

function typeAtEnd(editor: CollabClient, text: string): void {
  const state = editor.state!;
  editor.dispatch(state.tr.insertText(text, state.doc.firstChild!.nodeSize - 1));
}

/// A store that reports a conflict (another writer extended the document) for every batch
/// holding "poison": the room reloads and sends all its editors away, every time.
class ConflictingStore extends MemoryStore {
  override append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (JSON.stringify(request.steps).includes('poison'))
      return Promise.resolve({
        ok: false,
        reason: 'conflict',
        version: request.baseVersion,
        epoch: request.epoch,
      });
    return super.append(docId, request);
  }
}

/// A store whose `append` throws instead of rejecting (a host's own store with a bug).
class ThrowingStore extends MemoryStore {
  override append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (JSON.stringify(request.steps).includes('poison')) throw new Error('a bug in the store');
    return super.append(docId, request);
  }
}

/// A store that fails, once, the first append holding `marker`.
class FailingOnceStore extends MemoryStore {
  private failed = false;
  constructor(private readonly marker: string) {
    super();
  }
  override append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
    if (!this.failed && JSON.stringify(request.steps).includes(this.marker)) {
      this.failed = true;
      return Promise.reject(new Error('the disk said no'));
    }
    return super.append(docId, request);
  }
}

describe('client recovery', () => {
  it('rejects ready() once closed before the document loaded, whether called before or after', async (t) => {
    const server = await startServer();
    const editor = openEditor(server.url, 'closed-before-ready');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    // Settled within a second, or the assertion fails (rather than the test hanging).
    const within = (promise: Promise<void>): Promise<void> =>
      Promise.race([
        promise,
        delay(1000).then(() => Promise.reject(new Error('ready() still pending'))),
      ]);
    const before = editor.ready();
    editor.close();
    await assert.rejects(within(before), /the client is closed/);
    await assert.rejects(within(editor.ready()), /the client is closed/);
  });

  it('keeps an edit dispatched from onState while a broadcast of several runs is applied', async (t) => {
    // A long flush interval so that three editors' batches go out in one broadcast.
    const server = await startServer({
      flushIntervalMs: 300,
      flushUsPerSocket: 1_000_000,
      flushBusyPercent: 0,
    });
    let armed = false;
    let a: CollabClient | null = null;
    a = openEditor(server.url, 'reentry', {
      clientID: 'a',
      // A plugin view reacting to a remote change by dispatching, synchronously.
      onState: (_state, tr) => {
        if (armed && tr && tr.getMeta('rebased') !== undefined) {
          armed = false;
          typeAtEnd(a!, 'Q');
        }
      },
    });
    const b = openEditor(server.url, 'reentry', { clientID: 'b' });
    const c = openEditor(server.url, 'reentry', { clientID: 'c' });
    const editors = [a, b, c];
    t.after(async () => {
      for (const editor of editors) editor.close();
      await server.close();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    await waitFor(() => editors.every((e) => e.status === 'synced'), 'joined');
    typeAtEnd(b, '0');
    await delay(20);
    typeAtEnd(a, 'A');
    await delay(5);
    typeAtEnd(b, 'B');
    await delay(5);
    typeAtEnd(c, 'C');
    armed = true;
    await waitFor(
      () => !armed && editors.every((e) => e.status === 'synced' && !e.hasUnconfirmed),
      'settled',
      10_000,
    );
    await waitFor(() => editors.every((e) => e.state!.doc.eq(a.state!.doc)), 'converged', 10_000);
    assert.match(a.state!.doc.textContent, /Q/);
    assert.match(b.state!.doc.textContent, /Q/);
  });

  it('applies a batch once when its acknowledgement was lost and the catch-up is a whole document (room unloaded)', async (t) => {
    // The room unloads (snapshot written, history gone) while the editor is away.
    const server = await startServer({ idleUnloadMs: 50 });
    const reloads: { dropped: number }[] = [];
    const acknowledged: number[] = [];
    const editor = openEditor(server.url, 'lost-ack', {
      clientID: 'lost-ack-1',
      reconnectDelayMs: 1500,
      reconnectDelayMaxMs: 1500,
      reconnectJitter: 0,
      onReload: (info) => reloads.push(info),
      onAcknowledged: (version) => acknowledged.push(version),
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    typeAtEnd(editor, 'W');
    await editor.settled();
    typeAtEnd(editor, 'X');
    // The batch goes out, then the transport closes before its broadcast and ack come back.
    editor.socket.io.engine.close();
    await waitFor(() => editor.reconnects >= 1 && reloads.length === 1, 'reloaded', 10_000);
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'settled');
    const stored = (await (await fetch(`${server.url}/docs/lost-ack`)).json()) as {
      version: number;
    };
    assert.equal(editor.state!.doc.textContent, 'WX');
    assert.equal(stored.version, 2);
    assert.equal(editor.version, 2);
    // The lost acknowledgement is made up for: the batch is durable, and the editor says so.
    assert.equal(editor.acknowledgedVersion, 2);
    assert.deepEqual(acknowledged, [1, 2]);
  });

  it('counts a batch whose acknowledgement was lost as acknowledged once the join shows it, by steps', async (t) => {
    const server = await startServer();
    const acknowledged: number[] = [];
    const editor = openEditor(server.url, 'lost-ack-steps', {
      clientID: 'lost-ack-steps-1',
      reconnectDelayMs: 300,
      reconnectJitter: 0,
      onAcknowledged: (version) => acknowledged.push(version),
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    typeAtEnd(editor, 'X');
    editor.socket.io.engine.close();
    await waitFor(() => editor.reconnects >= 1 && editor.status === 'synced', 'rejoined');
    assert.equal(editor.state!.doc.textContent, 'X');
    assert.equal(editor.acknowledgedVersion, 1);
    assert.deepEqual(acknowledged, [1]);
  });

  it('applies a batch once when its acknowledgement was lost and others trimmed the history meanwhile', async (t) => {
    const server = await startServer({ maxHistorySteps: 20 });
    const a = openEditor(server.url, 'trimmed', {
      clientID: 'a',
      reconnectDelayMs: 1500,
      reconnectDelayMaxMs: 1500,
      reconnectJitter: 0,
    });
    const b = openEditor(server.url, 'trimmed', { clientID: 'b' });
    t.after(async () => {
      a.close();
      b.close();
      await server.close();
    });
    await Promise.all([a.ready(), b.ready()]);
    await waitFor(() => a.status === 'synced' && b.status === 'synced', 'joined');
    typeAtEnd(a, 'X');
    a.socket.io.engine.close();
    for (let i = 0; i < 40; i++) {
      typeAtEnd(b, 'b');
      await delay(5);
    }
    await waitFor(
      () =>
        a.reconnects >= 1 &&
        a.status === 'synced' &&
        !a.hasUnconfirmed &&
        !b.hasUnconfirmed &&
        a.version === b.version,
      'converged',
      10_000,
    );
    assert.equal(a.state!.doc.textContent, b.state!.doc.textContent);
    assert.equal(a.state!.doc.textContent.match(/X/g)?.length, 1);
  });

  it('rebases offline edits onto a whole-document catch-up, so that they keep their place', async (t) => {
    // While `a` is offline, `b` types more than the server keeps of history in front of the
    // text, and deletes the word `a` typed into: `a` catches up by whole document, and its
    // offline edits must follow the text they were made in, or go with it.
    const server = await startServer({ maxHistorySteps: 20 });
    const reloads: { dropped: number; reason: string }[] = [];
    const a = openEditor(server.url, 'offline-rebase', {
      clientID: 'a',
      onReload: (info) => reloads.push(info),
    });
    const b = openEditor(server.url, 'offline-rebase', { clientID: 'b' });
    t.after(async () => {
      a.close();
      b.close();
      await server.close();
    });
    await waitFor(() => a.status === 'synced' && b.status === 'synced', 'joined');
    typeAtEnd(a, 'keep gone');
    await waitFor(() => !a.hasUnconfirmed && b.version === a.version, 'shared');
    a.socket.disconnect();
    await waitFor(() => a.status === 'offline', 'offline');
    // Offline: "X" after "keep", "Y" inside "gone", "Z" at the end.
    a.dispatch(a.state!.tr.insertText('X', 5));
    a.dispatch(a.state!.tr.insertText('Y', 9));
    typeAtEnd(a, 'Z');
    assert.equal(a.state!.doc.textContent, 'keepX goYneZ');
    // Meanwhile: "gone" becomes "here", then 30 letters in front, one step each.
    b.dispatch(b.state!.tr.insertText('here', 6, 10));
    for (let i = 0; i < 30; i++) b.dispatch(b.state!.tr.insertText('b', 1));
    await waitFor(() => !b.hasUnconfirmed, 'b confirmed');
    a.socket.connect();
    await waitFor(
      () =>
        a.status === 'synced' && !a.hasUnconfirmed && !b.hasUnconfirmed && a.version === b.version,
      'converged',
      10_000,
    );
    assert.deepEqual(
      reloads.map((reload) => reload.dropped),
      [1],
      'one reload, which dropped the edit inside the replaced word',
    );
    const expected = `${'b'.repeat(30)}keepX hereZ`;
    assert.equal(a.state!.doc.textContent, expected);
    assert.equal(b.state!.doc.textContent, expected);
    // The cursor stays after the last offline edit.
    assert.equal(a.state!.selection.head, a.state!.doc.firstChild!.nodeSize - 1);
  });

  it('sends a batch again when its connection dropped before the server took it, catching up by whole document', async (t) => {
    // The append of the batch holding "Y" fails (the server never accepts it); the room
    // unloads meanwhile, so the editor catches up by whole document.
    const server = await startServer({ idleUnloadMs: 50 }, new FailingOnceStore('Y'));
    const editor = openEditor(server.url, 'not-landed', {
      clientID: 'not-landed-1',
      reconnectDelayMs: 1500,
      reconnectDelayMaxMs: 1500,
      reconnectJitter: 0,
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    typeAtEnd(editor, 'X');
    await editor.settled();
    typeAtEnd(editor, 'Y');
    editor.socket.io.engine.close();
    await waitFor(() => editor.reconnects >= 1, 'reconnected', 10_000);
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'settled');
    assert.equal(editor.state!.doc.textContent, 'XY');
    const stored = (await (await fetch(`${server.url}/docs/not-landed`)).json()) as {
      version: number;
    };
    assert.equal(stored.version, 2);
  });

  it('sends a long offline backlog in batches the server takes', async () => {
    for (const [maxMessageBytes, keystrokes] of [
      [64 * 1024, 1800],
      [4096, 300],
    ] as const) {
      const server = await startServer({ maxMessageBytes });
      const editor = openEditor(server.url, 'backlog', { clientID: 'backlog-1' });
      try {
        await waitFor(() => editor.status === 'synced', 'joined');
        editor.socket.disconnect();
        await waitFor(() => editor.status === 'offline', 'offline');
        // One step per keystroke: ~150 KB of steps for 1,800, over twice the default limit,
        // which used to close the connection on every try, for ever.
        for (let i = 0; i < keystrokes; i++) typeAtEnd(editor, 'a');
        editor.socket.connect();
        await waitFor(
          () => editor.status === 'synced' && !editor.hasUnconfirmed,
          `${keystrokes} steps confirmed under a ${maxMessageBytes}-byte limit`,
          20_000,
        );
        assert.equal(editor.version, keystrokes);
        // Never dropped for size; a batch over the server's time budget is refused
        // `too-large` and goes again in halves, which is how that budget is meant to work.
        assert.equal(editor.reconnects, 0);
        assert.equal(editor.error, null);
      } finally {
        editor.close();
        await server.close();
      }
    }
  });

  it('does not send a step larger than the server takes; it drops it and says so', async (t) => {
    const server = await startServer({ maxMessageBytes: 4096 });
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(server.url, 'huge-step', {
      clientID: 'huge-1',
      onReload: (info) => reloads.push(info),
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    typeAtEnd(editor, 'x'.repeat(10_000));
    await waitFor(() => reloads.length === 1, 'reloaded');
    assert.deepEqual(reloads[0], { dropped: 1, reason: 'the server refused local steps' });
    assert.equal(editor.error?.code, 'too-large');
    assert.equal(editor.state!.doc.textContent, '');
    assert.equal(editor.reconnects, 0);
    // Still connected and editing.
    typeAtEnd(editor, 'ok');
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    assert.equal(editor.state!.doc.textContent, 'ok');
  });

  it('rejects settled() once the client is closed with steps unconfirmed, instead of never answering', async (t) => {
    const server = await startServer();
    const editor = openEditor(server.url, 'closing', { clientID: 'closing-1' });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    editor.socket.disconnect();
    typeAtEnd(editor, 'kept locally');
    const waiting = editor.settled();
    editor.close();
    await assert.rejects(waiting, /closed/);
    await assert.rejects(editor.settled(), /closed/);
    // The unconfirmed steps stay in the state, for the application to save.
    assert.ok(editor.hasUnconfirmed);
  });

  it('backs off when the server sends its editors away again and again', async (t) => {
    const server = await startServer({}, new ConflictingStore());
    const a = openEditor(server.url, 'evicted', { clientID: 'a', reconnectDelayMs: 200 });
    const b = openEditor(server.url, 'evicted', { clientID: 'b', reconnectDelayMs: 200 });
    t.after(async () => {
      a.close();
      b.close();
      await server.close();
    });
    await Promise.all([a.ready(), b.ready()]);
    await waitFor(() => a.status === 'synced' && b.status === 'synced', 'joined');
    typeAtEnd(a, 'poison');
    // Every attempt of a's batch reloads the room and sends both away. With 200, 400,
    // 800, 1600 ms (and jitter) between evictions, b comes back at most ~6 times in 4 s;
    // without backoff it came back within 0–250 ms, 15–20 times.
    await delay(4000);
    assert.ok(b.reconnects >= 2, `b reconnected ${b.reconnects} times: not sent away at all`);
    assert.ok(b.reconnects <= 8, `b reconnected ${b.reconnects} times in 4 s`);
  });

  it('refuses with unavailable, and keeps serving, a batch whose store append throws', async (t) => {
    const server = await startServer({}, new ThrowingStore());
    const a = openEditor(server.url, 'throwing', { clientID: 'a', reconnectDelayMs: 100 });
    const b = openEditor(server.url, 'throwing', { clientID: 'b' });
    t.after(async () => {
      a.close();
      b.close();
      await server.close();
    });
    await Promise.all([a.ready(), b.ready()]);
    await waitFor(() => a.status === 'synced' && b.status === 'synced', 'joined');
    typeAtEnd(a, 'poison');
    await waitFor(() => (a.refusals['unavailable'] ?? 0) >= 2, 'the batch refused, retried');
    // The room did not fail: b was not sent away and its edits go through.
    typeAtEnd(b, 'fine');
    await waitFor(() => !b.hasUnconfirmed && a.state!.doc.textContent.includes('fine'), 'b');
    assert.equal(b.reconnects, 0);
  });

  it('keeps its edit and retries calmly while every fresh token is refused as expired', async (t) => {
    let handshakes = 0;
    let expired = false;
    // A host that verifies with a clock tolerance and passes the token's own expiry: once
    // the tokens are past it, every handshake is refused `unauthorized`.
    const authenticate: Authenticate = () => {
      handshakes++;
      return { user: 'u', access: 'write', expiresAt: expired ? Date.now() - 1000 : Infinity };
    };
    const collab = createCollab({
      store: new MemoryStore(),
      authenticate,
      logger: pino({ level: 'silent' }),
      limits: { batchesPerSecond: 0, pullsPerSecond: 0 },
    });
    const http = createServer();
    const io = new Server(http, collab.socketOptions);
    collab.attach(io);
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    const editor = new CollabClient({
      url,
      docId: 'expired',
      token: () => 'fresh',
      reconnectDelayMs: 200,
    });
    t.after(async () => {
      editor.close();
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    expired = true;
    io.disconnectSockets(true);
    await waitFor(() => editor.status === 'offline', 'offline');
    typeAtEnd(editor, 'x');
    const before = handshakes;
    await delay(2500);
    const attempts = handshakes - before;
    // Refused handshakes are retried every second or two: a few, not hundreds.
    assert.ok(attempts >= 1, `${attempts} handshakes: the client gave up`);
    assert.ok(attempts <= 4, `${attempts} handshakes in 2.5 s`);
    assert.notEqual(editor.status, 'failed');
    // The edit is kept, waiting for a token the server takes.
    assert.ok(editor.hasUnconfirmed);
  });

  it('resets the acknowledged version when the server answers with a new history', async (t) => {
    let server = await startServer();
    const port = server.port;
    const reloads: { reason: string }[] = [];
    const editor = openEditor(server.url, 'epoch', {
      clientID: 'e',
      onReload: (info) => reloads.push(info),
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    for (const letter of 'abcde') {
      typeAtEnd(editor, letter);
      await editor.settled();
    }
    assert.equal(editor.acknowledgedVersion, 5);
    // The memory store is gone with the server: the new one starts a new history.
    await server.close();
    server = await startServer({ port });
    await waitFor(() => editor.status === 'synced' && reloads.length === 1, 'reloaded', 10_000);
    assert.match(reloads[0]!.reason, /history was reset/);
    typeAtEnd(editor, 'z');
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    assert.equal(editor.acknowledgedVersion, editor.version);
  });
});
