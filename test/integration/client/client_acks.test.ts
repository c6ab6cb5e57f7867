import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CollabClient } from '../../../client/index.js';
import type { StepJSON } from '../../../schema/events.js';
import { openEditor } from '../../support/editors.js';
import { SlowStore } from '../../support/slow_store.js';
import { startServer } from '../../support/server.js';
import { waitFor } from '../../support/wait.js';

// What the client reports as acknowledged (durable on the server) when connections drop
// between a batch's broadcast and its acknowledgement. Real server, real sockets.

function typeAtEnd(editor: CollabClient, text: string): void {
  const state = editor.state!;
  editor.dispatch(state.tr.insertText(text, state.doc.firstChild!.nodeSize - 1));
}

describe('client acknowledgements', () => {
  it('reports a batch as acknowledged when its broadcast came but the connection dropped before its acknowledgement', async (t) => {
    const server = await startServer();
    const acknowledged: number[] = [];
    let dropOnConfirm = false;
    let editor: CollabClient | null = null;
    editor = openEditor(server.url, 'ack-after-broadcast', {
      clientID: 'ack-1',
      reconnectDelayMs: 100,
      reconnectJitter: 0,
      onAcknowledged: (version) => acknowledged.push(version),
      // The broadcast that confirms the batch is applied: the transport closes at once, before
      // the acknowledgement written after it is read.
      onState: (_state, tr) => {
        if (dropOnConfirm && tr !== null && !editor!.hasUnconfirmed) {
          dropOnConfirm = false;
          editor!.socket.io.engine.close();
        }
      },
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor!.status === 'synced', 'joined');
    typeAtEnd(editor, 'A');
    await editor.settled();
    dropOnConfirm = true;
    typeAtEnd(editor, 'B');
    await waitFor(() => editor!.reconnects >= 1 && editor!.status === 'synced', 'rejoined');
    assert.equal(editor.state!.doc.textContent, 'AB');
    assert.equal(editor.version, 2);
    // "B" is durable (it was broadcast), and nothing more will come to say so.
    assert.equal(editor.acknowledgedVersion, 2);
    assert.deepEqual(acknowledged, [1, 2]);
  });

  it('reports a batch as acknowledged when it lands after the editor came back and resent it', async (t) => {
    // "B" takes 400 ms to journal: the editor is back and has joined before it is published,
    // sends it again (refused stale: the server has it already), and sees it in a broadcast.
    const server = await startServer({}, new SlowStore({ appendMs: 400, marker: 'B' }));
    const acknowledged: number[] = [];
    const editor = openEditor(server.url, 'ack-after-resend', {
      clientID: 'ack-2',
      reconnectDelayMs: 20,
      reconnectJitter: 0,
      onAcknowledged: (version) => acknowledged.push(version),
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'joined');
    typeAtEnd(editor, 'A');
    await editor.settled();
    typeAtEnd(editor, 'B');
    editor.socket.io.engine.close();
    await waitFor(() => editor.reconnects >= 1 && editor.status === 'synced', 'rejoined');
    assert.equal(editor.state!.doc.textContent, 'AB');
    assert.equal(editor.version, 2);
    assert.equal(editor.refusals['stale'], 1, 'the resend was refused, not applied twice');
    assert.equal(editor.acknowledgedVersion, 2);
    assert.deepEqual(acknowledged, [1, 2]);
  });

  it('neither sends nor acknowledges a key flushed while a rejoin answer is applied, before it lands', async (t) => {
    // "X" lands but its acknowledgement is lost with the connection; the room is unloaded
    // meanwhile, so the rejoin answers with the whole document. While it is applied the view
    // flushes a key, "Z" (`beforeRemote`). Sent then, "X" and "Z" went out as one batch that
    // replaced the lost one, and "X"'s landing was reported with "Z" in it: "Z" was called
    // durable before the server had it, and acknowledged a second time later.
    const server = await startServer({ idleUnloadMs: 50 });
    const acknowledged: { version: number; text: string }[] = [];
    const sent: { version: number; text: string }[] = [];
    const textOf = (steps: readonly StepJSON[]): string =>
      steps.map((step) => JSON.stringify(step).match(/"text":"([^"]*)"/)?.[1] ?? '').join('');
    let flushKey = false;
    let editor: CollabClient | null = null;
    editor = openEditor(server.url, 'flush-into-rejoin', {
      clientID: 'ack-3',
      reconnectDelayMs: 400,
      reconnectDelayMaxMs: 400,
      reconnectJitter: 0,
      beforeRemote: () => {
        if (!flushKey) return;
        flushKey = false;
        typeAtEnd(editor!, 'Z');
      },
      onAcknowledged: (version, steps) => acknowledged.push({ version, text: textOf(steps) }),
    });
    editor.socket.onAnyOutgoing((event, payload: { version: number; steps?: StepJSON[] }) => {
      if (event === 'steps') sent.push({ version: payload.version, text: textOf(payload.steps!) });
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor!.status === 'synced', 'joined');
    typeAtEnd(editor, 'W');
    await editor.settled();
    typeAtEnd(editor, 'X');
    editor.socket.io.engine.close();
    flushKey = true;
    await waitFor(() => editor!.reconnects >= 1 && !flushKey, 'the rejoin');
    await waitFor(() => editor!.status === 'synced' && !editor!.hasUnconfirmed, 'settled');
    assert.equal(editor.state!.doc.textContent, 'WXZ');
    assert.deepEqual(sent, [
      { version: 0, text: 'W' },
      { version: 1, text: 'X' },
      { version: 2, text: 'Z' },
    ]);
    assert.deepEqual(acknowledged, [
      { version: 1, text: 'W' },
      { version: 2, text: 'X' },
      { version: 3, text: 'Z' },
    ]);
  });
});
