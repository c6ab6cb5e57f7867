import assert from 'node:assert/strict';
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import type { CollabClient } from '../../client/index.js';
import { openEditor } from '../support/editors.js';
import { startServer } from '../support/server.js';
import { delay, waitFor } from '../support/wait.js';

/// Types `text` at the end of the editor's first paragraph, as one step.
function type(editor: CollabClient, text: string): void {
  const state = editor.state!;
  editor.dispatch(state.tr.insertText(text, state.doc.firstChild!.nodeSize - 1));
}

/// A TCP proxy to `port` that delays what the server sends by `delayMs` (in order), as a
/// distant server would. Returns its URL and a function that closes it.
async function slowProxy(port: number, delayMs: number): Promise<{ url: string; close(): void }> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port });
    sockets.add(client).add(upstream);
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => setTimeout(() => client.write(chunk), delayMs));
    const closeBoth = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', closeBoth).on('error', closeBoth);
    upstream.on('close', closeBoth).on('error', closeBoth);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close(): void {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

describe('client: a batch refused as too-large', () => {
  it('is sent again in halves: every step before the one the server will not take is kept', async () => {
    // Documents up to 4 KB: one insert of 5,000 characters is refused on its own.
    const server = await startServer({ maxDocBytes: 4096 });
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(server.url, 'split-batches', {
      onReload: (info) => reloads.push(info),
    });
    try {
      await waitFor(() => editor.status === 'synced', 'the editor to join');
      // One step goes out at once; the next six queue behind it and go as one batch, whose
      // last step the server refuses: the five before it must not be lost with it.
      type(editor, 'a');
      for (const letter of 'bcdef') type(editor, letter);
      type(editor, 'x'.repeat(5000));
      await waitFor(
        () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
        'the batch to be split, its steps confirmed but the last',
      );
      assert.equal(editor.state!.doc.textContent, 'abcdef');
      assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
      assert.equal(editor.version, 6);
      const response = await fetch(`${server.url}/docs/split-batches`);
      const stored = (await response.json()) as { version: number; doc: unknown };
      assert.equal(stored.version, 6);
      assert.deepEqual(stored.doc, editor.state!.doc.toJSON());
      // Refused whole, then in halves until the step alone: at least three refusals.
      assert.ok((editor.refusals['too-large'] ?? 0) >= 3, JSON.stringify(editor.refusals));
    } finally {
      editor.close();
      await server.close();
    }
  });
});

describe('client: a long backlog of short steps', () => {
  it('goes out in batches sized by their JSON, which the server takes: none is refused too-large', async () => {
    // The server's size check once counted every number as 8 bytes: a batch of one-character
    // steps that the client kept under 90% of the limit by its JSON was refused, each refusal a
    // strike, until the socket was closed too-many-errors with steps still unsent.
    // A generous time budget: only the size check may refuse a batch here.
    const server = await startServer({
      maxMessageBytes: 16_384,
      maxStepsPerBatch: 10_000,
      maxApplyMs: 5_000,
    });
    const editor = openEditor(server.url, 'long-backlog');
    try {
      await waitFor(() => editor.status === 'synced', 'the editor to join');
      for (let i = 0; i < 3000; i++) type(editor, 'a');
      await waitFor(() => !editor.hasUnconfirmed, 'every step to be confirmed', 60_000);
      assert.equal(editor.status, 'synced');
      assert.deepEqual(editor.refusals, {});
      assert.equal(editor.version, 3000);
      assert.equal(editor.state!.doc.textContent, 'a'.repeat(3000));
    } finally {
      editor.close();
      await server.close();
    }
  });
});

describe('client: a step the server refuses for good', () => {
  it('keeps what is typed after the reload that dropped it', async () => {
    // 40 ms from the server to the client: keys typed while the refusal and the reload are on
    // their way are sent, with the refused step again, before the reload comes.
    const server = await startServer();
    const proxy = await slowProxy(server.port, 40);
    const typed: string[] = [];
    const reloads: { dropped: number; typedBefore: number }[] = [];
    const editor = openEditor(proxy.url, 'after-the-reload', {
      onReload: (info) => reloads.push({ dropped: info.dropped, typedBefore: typed.length }),
    });
    try {
      await waitFor(() => editor.status === 'synced', 'the editor to join');
      // An attribute the paragraph does not define: applied here, refused `invalid-step`.
      editor.dispatch(editor.state!.tr.setNodeAttribute(0, 'bogus', 1));
      for (let i = 0; i < 80; i++) {
        const letter = String.fromCharCode(97 + (i % 26));
        type(editor, letter);
        typed.push(letter);
        await delay(5);
      }
      await waitFor(
        () => editor.status === 'synced' && !editor.hasUnconfirmed,
        'every key to be confirmed or dropped',
      );
      assert.ok(reloads.length >= 1);
      assert.equal(editor.error?.code, 'invalid-step');
      // What was typed before the reload went with the refused step (the client's rule for a
      // step the server will never take); what was typed after it is on a sound document.
      const kept = typed.slice(reloads[0]!.typedBefore).join('');
      assert.equal(editor.state!.doc.textContent, kept, JSON.stringify(reloads));
      assert.deepEqual(
        reloads.map((reload) => reload.dropped),
        [reloads[0]!.typedBefore + 1],
      );
    } finally {
      editor.close();
      proxy.close();
      await server.close();
    }
  });

  it('keeps what is typed after the reload when the view flushes a key into the reload itself', async () => {
    // A view flushes what is still in the DOM before remote changes are applied
    // (`beforeRemote`): here one key, while the reload that drops the refused step is applied.
    // Sent then, it went out on the state before the reload, refused step included; refused
    // again, it asked for a second reload, which dropped what was typed after the first.
    const server = await startServer();
    let flushKey = false;
    let editor: CollabClient | null = null;
    const reloads: number[] = [];
    const sent: string[][] = [];
    editor = openEditor(server.url, 'flush-into-reload', {
      beforeRemote: () => {
        if (!flushKey) return;
        flushKey = false;
        type(editor!, 'p');
      },
      onReload: (info) => {
        reloads.push(info.dropped);
        // Typing goes on, on the reloaded document.
        if (reloads.length === 1)
          setTimeout(() => {
            type(editor!, 'KEEP');
            type(editor!, 'ME');
          }, 0);
      },
    });
    editor.socket.onAnyOutgoing((event, payload: { steps?: { stepType: string }[] }) => {
      if (event === 'steps') sent.push(payload.steps!.map((step) => step.stepType));
    });
    try {
      await waitFor(() => editor!.status === 'synced', 'the editor to join');
      editor.dispatch(editor.state!.tr.setNodeAttribute(0, 'bogus', 1));
      flushKey = true;
      await waitFor(() => reloads.length === 1 && !flushKey, 'the reload');
      await delay(300);
      await waitFor(
        () => editor!.status === 'synced' && !editor!.hasUnconfirmed,
        'every key to be confirmed',
      );
      assert.deepEqual(reloads, [2], 'one reload, dropping the refused step and the key before it');
      assert.equal(editor.state!.doc.textContent, 'KEEPME');
      // The refused step was sent once.
      assert.equal(sent.filter((steps) => steps.includes('attr')).length, 1, JSON.stringify(sent));
    } finally {
      editor.close();
      await server.close();
    }
  });
});
