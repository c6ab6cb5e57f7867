import assert from 'node:assert/strict';
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import type { CollabClient } from '../../../client/index.js';
import { nodeStats } from '../../../schema/doc_size.js';
import { type BatchLimits } from '../../../schema/events.js';
import { openEditor } from '../../support/editors.js';
import { startServer, type TestServer } from '../../support/server.js';
import { delay, waitFor } from '../../support/wait.js';

/// Types `text` at the end of the editor's first paragraph, as one step.
function type(editor: CollabClient, text: string): void {
  const state = editor.state!;
  editor.dispatch(state.tr.insertText(text, state.doc.firstChild!.nodeSize - 1));
}

type Reload = { dropped: number; reason: string };

/// An editor of `docId` on `url` whose reloads (`onReload`) are kept in `reloads`.
function editorWithReloads(
  url: string,
  docId: string,
): { editor: CollabClient; reloads: Reload[] } {
  const reloads: Reload[] = [];
  const editor = openEditor(url, docId, { onReload: (info) => reloads.push(info) });
  return { editor, reloads };
}

/// Waits for `editor` to join, then cuts its connection: what it types next waits offline.
async function joinThenGoOffline(editor: CollabClient): Promise<void> {
  await waitFor(() => editor.status === 'synced', 'the editor to join');
  editor.socket.disconnect();
  await waitFor(() => editor.status === 'offline', 'offline');
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
  it('is sent again one step at a time: every step but the one the server will not take is kept', async (t) => {
    // Documents up to 4 KB: one insert of 5,000 characters is refused on its own.
    const server = await startServer({ maxDocBytes: 4096 });
    const { editor, reloads } = editorWithReloads(server.url, 'split-batches');
    t.after(async () => {
      editor.close();
      await server.close();
    });
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
    // Refused whole, once: the refusal says how much the document may still grow, and the
    // step that does not fit is dropped without being sent again alone.
    assert.deepEqual(editor.refusals, { 'too-large': 1 });
  });
});

describe('client: a long backlog of short steps', () => {
  it('goes out in batches sized by their JSON, which the server takes: none is refused too-large', async (t) => {
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
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'the editor to join');
    for (let i = 0; i < 3000; i++) type(editor, 'a');
    await waitFor(() => !editor.hasUnconfirmed, 'every step to be confirmed', 60_000);
    assert.equal(editor.status, 'synced');
    assert.deepEqual(editor.refusals, {});
    assert.equal(editor.version, 3000);
    assert.equal(editor.state!.doc.textContent, 'a'.repeat(3000));
  });
});

describe('client: a step the server refuses for good', () => {
  it('drops it alone: every key typed before and after its refusal is kept', async (t) => {
    // 40 ms from the server to the client: keys are typed while the refusal is on its way.
    const server = await startServer();
    const proxy = await slowProxy(server.port, 40);
    const typed: string[] = [];
    const reloads: { dropped: number; typedBefore: number }[] = [];
    const editor = openEditor(proxy.url, 'after-the-reload', {
      onReload: (info) => reloads.push({ dropped: info.dropped, typedBefore: typed.length }),
    });
    t.after(async () => {
      editor.close();
      proxy.close();
      await server.close();
    });
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
    // Only the refused step is dropped: what was typed before its refusal came was once
    // dropped with it.
    assert.equal(editor.state!.doc.textContent, typed.join(''), JSON.stringify(reloads));
    assert.deepEqual(
      reloads.map((reload) => reload.dropped),
      [1],
    );
  });

  it('keeps a key the view flushes into the drop, and what is typed after it', async (t) => {
    // A view flushes what is still in the DOM before the state is replaced (`beforeRemote`):
    // here one key, while the refused step is dropped. Sent then, it would go out on the state
    // before the drop, refused step included; refused again, a second drop (once a second
    // reload) would drop what was typed after the first.
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
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor!.status === 'synced', 'the editor to join');
    editor.dispatch(editor.state!.tr.setNodeAttribute(0, 'bogus', 1));
    flushKey = true;
    await waitFor(() => reloads.length === 1 && !flushKey, 'the drop');
    await delay(300);
    await waitFor(
      () => editor!.status === 'synced' && !editor!.hasUnconfirmed,
      'every key to be confirmed',
    );
    assert.deepEqual(reloads, [1], 'one drop, of the refused step alone');
    assert.equal(editor.state!.doc.textContent, 'pKEEPME');
    // The refused step was sent once.
    assert.equal(sent.filter((steps) => steps.includes('attr')).length, 1, JSON.stringify(sent));
  });
});

/// Inserts an image whose `data:` URL is `bytes` long at the end of the first paragraph: the
/// client's schema takes it (it checks the scheme), the server refuses a string that long.
function pasteImage(editor: CollabClient, bytes: number): void {
  const state = editor.state!;
  const src = 'data:image/png;base64,' + 'A'.repeat(bytes);
  editor.dispatch(
    state.tr.insert(
      state.doc.firstChild!.nodeSize - 1,
      state.schema.nodes['image']!.create({ src }),
    ),
  );
}

/// Appends a paragraph holding `text` to the document, as one step.
function addParagraph(editor: CollabClient, text: string): void {
  const state = editor.state!;
  const paragraph = state.schema.nodes['paragraph']!.create(null, state.schema.text(text));
  editor.dispatch(state.tr.insert(state.doc.content.size, paragraph));
}

/// The document the server holds for `docId`.
async function stored(url: string, docId: string): Promise<{ version: number; doc: unknown }> {
  const response = await fetch(`${url}/docs/${docId}`);
  return (await response.json()) as { version: number; doc: unknown };
}

/// Makes `server` answer joins as servers did before their `limits` said `maxAttributeBytes`
/// and `maxJsonDepth`: a client learns of a step over them only when the server refuses it.
/// Socket.io middleware after the server's own, wrapping the join's acknowledgement.
function asOlderServer(server: TestServer): void {
  server.server.io.on('connection', (socket) => {
    socket.use((packet, next) => {
      const last = packet.length - 1;
      const ack: unknown = packet[last];
      if (packet[0] === 'join' && typeof ack === 'function') {
        packet[last] = (answer: { limits?: BatchLimits }) => {
          if (answer.limits) {
            const older: BatchLimits = { ...answer.limits };
            delete older.maxAttributeBytes;
            delete older.maxJsonDepth;
            answer = { ...answer, limits: older };
          }
          (ack as (answer: unknown) => void)(answer);
        };
      }
      next();
    });
  });
}

/// The protocol errors (strikes) the server counts against each of its connected sockets.
function strikes(server: TestServer): number[] {
  return [...server.server.io.of('/').sockets.values()].map((socket) => socket.data.protocolErrors);
}

describe("client: a step the server's payload gate would refuse", () => {
  it('is dropped without being sent: oversized images pasted offline cost no strike, every word lands', async (t) => {
    // An editor offline types words with a small data: image after each, every src over the
    // server's MAX_ATTRIBUTE_BYTES (4 KiB by default) and far under its message limit. Each
    // image the server refused was a strike (20 close the connection for good, with what was
    // typed after it unsent); the join answer now says the limit, and the client drops them.
    const server = await startServer();
    const images = 16;
    const { editor, reloads } = editorWithReloads(server.url, 'gate-images');
    const sent: string[] = [];
    editor.socket.onAnyOutgoing((event, payload: unknown) => {
      if (event === 'steps') sent.push(JSON.stringify(payload));
    });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    const words: string[] = [];
    for (let i = 0; i < images; i++) {
      type(editor, `w${i} `);
      words.push(`w${i} `);
      pasteImage(editor, 6000);
    }
    type(editor, 'last words');
    words.push('last words');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === images,
      'every word confirmed, every image dropped',
    );
    assert.deepEqual(
      reloads,
      Array.from({ length: images }, () => ({
        dropped: 1,
        reason: 'the server refused local steps',
      })),
    );
    // The body the server's gate answers such a message with.
    assert.deepEqual(editor.error, {
      code: 'too-large',
      message: 'A string of 6022 characters exceeds the limit of 4096',
      retryable: false,
    });
    assert.equal(editor.state!.doc.textContent, words.join(''));
    assert.deepEqual(editor.refusals, {});
    assert.equal(editor.reconnects, 0);
    assert.deepEqual(strikes(server), [0]);
    assert.ok(sent.length > 0);
    assert.ok(!sent.some((message) => message.includes('data:image')), 'an image was sent');
    const held = await stored(server.url, 'gate-images');
    assert.equal(held.version, images + 1);
    assert.deepEqual(held.doc, editor.state!.doc.toJSON());
  });

  it('drops a step nested deeper than the server takes, without sending it', async (t) => {
    // MAX_JSON_DEPTH 16: a step inserting blockquotes seven deep nests its JSON deeper.
    const server = await startServer({ maxDocDepth: 4, maxJsonDepth: 16 });
    const { editor, reloads } = editorWithReloads(server.url, 'gate-depth');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    type(editor, 'before ');
    const { schema } = editor.state!;
    let node = schema.nodes['paragraph']!.create(null, schema.text('deep'));
    for (let i = 0; i < 7; i++) node = schema.nodes['blockquote']!.create(null, node);
    editor.dispatch(editor.state!.tr.insert(editor.state!.doc.content.size, node));
    type(editor, 'after');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the deep one',
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.deepEqual(editor.error, {
      code: 'too-deep',
      message: 'The message is nested deeper than 16 levels',
      retryable: false,
    });
    assert.equal(editor.state!.doc.textContent, 'before after');
    assert.deepEqual(editor.refusals, {});
    assert.deepEqual(strikes(server), [0]);
    assert.deepEqual((await stored(server.url, 'gate-depth')).doc, editor.state!.doc.toJSON());
  });

  it('is sent and refused by a server that does not say its limits, as before', async (t) => {
    // An older server: the client learns of the limit only from the refusal, then sends the
    // batch's steps one at a time and drops the refused one alone.
    const server = await startServer();
    asOlderServer(server);
    const { editor, reloads } = editorWithReloads(server.url, 'gate-older-server');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    type(editor, 'before ');
    pasteImage(editor, 6000);
    type(editor, 'after');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the image',
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.equal(editor.state!.doc.textContent, 'before after');
    // Refused whole, then alone: a strike each.
    assert.deepEqual(editor.refusals, { 'too-large': 2 });
    assert.deepEqual(strikes(server), [2]);
  });
});

describe('client: one step of a batch refused for good', () => {
  it('costs only that step: the steps before and after it reach the server', async (t) => {
    // An offline editor types, pastes an image whose data: URL is over the server's attribute
    // limit, and types on. Back online, its backlog goes as one batch, which the server
    // refuses whole (too-large) without saying which step. The client used to drop all of it.
    const server = await startServer({ maxAttributeBytes: 4096 });
    asOlderServer(server);
    const { editor, reloads } = editorWithReloads(server.url, 'one-bad-step');
    const reader = openEditor(server.url, 'one-bad-step');
    t.after(async () => {
      editor.close();
      reader.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    for (const word of ['Typed ', 'before ', 'the ', 'paste. ']) type(editor, word);
    pasteImage(editor, 6000);
    for (const word of ['Typed ', 'after.']) type(editor, word);
    addParagraph(editor, 'Second one.');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the image',
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.equal(editor.error?.code, 'too-large');
    assert.equal(editor.state!.doc.textContent, 'Typed before the paste. Typed after.Second one.');
    assert.equal(editor.state!.doc.childCount, 2);
    assert.equal(editor.version, 7);
    // Refused once whole, once alone: each refusal a strike against the connection, which
    // must stay far under the server's limit (20).
    assert.deepEqual(editor.refusals, { 'too-large': 2 });
    assert.equal(editor.reconnects, 0);
    const held = await stored(server.url, 'one-bad-step');
    assert.equal(held.version, 7);
    assert.deepEqual(held.doc, editor.state!.doc.toJSON());
    await waitFor(() => reader.version === 7, 'the other editor to catch up');
    assert.deepEqual(reader.state!.doc.toJSON(), editor.state!.doc.toJSON());
    // Still editing.
    type(editor, '!');
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    assert.equal(editor.version, 8);
  });

  it('drops a step that depended on the refused one, and counts it', async (t) => {
    const server = await startServer({ maxAttributeBytes: 4096 });
    asOlderServer(server);
    const { editor, reloads } = editorWithReloads(server.url, 'dependent-step');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    type(editor, 'Kept. ');
    // A new paragraph with the oversized image in it (refused), text typed inside that
    // paragraph (it goes with it), then text typed in the first paragraph (kept).
    const state = editor.state!;
    const { schema } = state;
    const src = 'data:image/png;base64,' + 'A'.repeat(6000);
    const paragraph = schema.nodes['paragraph']!.create(null, [
      schema.text('caption '),
      schema.nodes['image']!.create({ src }),
    ]);
    const at = state.doc.content.size;
    editor.dispatch(state.tr.insert(at, paragraph));
    editor.dispatch(editor.state!.tr.insertText('inside ', at + 1));
    type(editor, 'Also kept.');
    assert.equal(editor.state!.doc.childCount, 2);
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed or dropped',
    );
    assert.deepEqual(reloads, [{ dropped: 2, reason: 'the server refused local steps' }]);
    assert.equal(editor.state!.doc.textContent, 'Kept. Also kept.');
    assert.equal(editor.state!.doc.childCount, 1);
    assert.equal(editor.version, 2);
    const held = await stored(server.url, 'dependent-step');
    assert.deepEqual(held.doc, editor.state!.doc.toJSON());
  });

  it('finds the refused step again after remote steps moved it, without sending it again', async (t) => {
    // 40 ms from the server to this editor: another editor's step, broadcast before the
    // refusal, arrives first and rebases the refused step. The step then looks like no step
    // sent, yet is the one refused: sent again, each refusal would be one more strike.
    const server = await startServer({ maxAttributeBytes: 4096 });
    asOlderServer(server);
    const proxy = await slowProxy(server.port, 40);
    const { editor, reloads } = editorWithReloads(proxy.url, 'moved-bad-step');
    const other = openEditor(server.url, 'moved-bad-step');
    t.after(async () => {
      editor.close();
      other.close();
      proxy.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'the editor to join');
    await waitFor(() => other.status === 'synced', 'the other editor to join');
    type(editor, 'mine');
    await waitFor(() => other.version === 1 && editor.status === 'synced', 'both at 1');
    other.dispatch(other.state!.tr.insertText('theirs ', 1));
    await waitFor(() => other.status === 'synced' && !other.hasUnconfirmed, 'theirs confirmed');
    // Their broadcast is still on its way to this editor.
    assert.equal(editor.version, 1);
    pasteImage(editor, 6000);
    type(editor, ' kept');
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'the image dropped, the rest confirmed',
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.deepEqual(editor.refusals, { 'too-large': 1 });
    assert.equal(editor.state!.doc.textContent, 'theirs mine kept');
    await waitFor(() => other.version === editor.version, 'the other editor to catch up');
    assert.deepEqual(other.state!.doc.toJSON(), editor.state!.doc.toJSON());
  });

  it('halves a long refused batch before sending its steps one at a time', async (t) => {
    // A long batch refused too-large may only have been over the server's time budget: it is
    // halved first, and only a refused half of at most 64 steps goes one step at a time.
    const server = await startServer({ maxAttributeBytes: 4096 });
    asOlderServer(server);
    const { editor, reloads } = editorWithReloads(server.url, 'long-bad-batch');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    for (let i = 0; i < 150; i++) type(editor, 'a');
    pasteImage(editor, 6000);
    for (let i = 0; i < 50; i++) type(editor, 'b');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the image',
      20_000,
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.equal(editor.state!.doc.textContent, 'a'.repeat(150) + 'b'.repeat(50));
    assert.equal(editor.version, 200);
    // 201 steps refused, then 100 of them, then 50, then the image alone.
    assert.equal(editor.refusals['too-large'], 4);
    assert.equal(editor.reconnects, 0);
    assert.deepEqual((await stored(server.url, 'long-bad-batch')).doc, editor.state!.doc.toJSON());
  });

  it('drops a local step over the message size alone, without sending it', async (t) => {
    const server = await startServer({ maxMessageBytes: 4096 });
    const { editor, reloads } = editorWithReloads(server.url, 'one-huge-step');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await joinThenGoOffline(editor);
    type(editor, 'before ');
    type(editor, 'x'.repeat(10_000));
    type(editor, 'after');
    editor.socket.connect();
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the huge one',
    );
    assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
    assert.equal(editor.error?.code, 'too-large');
    assert.equal(editor.state!.doc.textContent, 'before after');
    assert.deepEqual(editor.refusals, {});
    const held = await stored(server.url, 'one-huge-step');
    assert.equal(held.version, 2);
    assert.deepEqual(held.doc, editor.state!.doc.toJSON());
  });

  it('sends a step whose text JSON escapes or UTF-8 make longer than the gate counts it', async (t) => {
    // The gate counts a string's UTF-16 length, not its escapes or its UTF-8 bytes: 2,500 é,
    // quotes or newlines make a step of 5,000+ bytes of JSON that it measures at ~2,550, under
    // a 4,096-byte limit. The client judged them by their UTF-8 JSON and dropped them unsent.
    const server = await startServer({ maxMessageBytes: 4096 });
    const { editor, reloads } = editorWithReloads(server.url, 'escaped-paste');
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'the editor to join');
    let expected = '';
    for (const char of ['é', '"', '\n']) {
      const text = char.repeat(2500);
      type(editor, text);
      expected += text;
      await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    }
    assert.deepEqual(reloads, []);
    assert.equal(editor.version, 3);
    assert.equal(editor.state!.doc.textContent, expected);
    assert.deepEqual(editor.refusals, {});
    assert.deepEqual(strikes(server), [0]);
    // Over twice the limit in real bytes, Engine.IO would close the connection: 1,500 "語"
    // (3 bytes each) are 4,500 bytes of UTF-8 but 1,550 by the gate's count, and sent;
    // 3,000 would be 9,000 bytes on the wire, over 8,192, and are dropped unsent.
    type(editor, '語'.repeat(1500));
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    assert.equal(editor.version, 4);
    // An emoji is a surrogate pair, 4 bytes of UTF-8 (once counted 6): 1,800 are 7,200
    // bytes on the wire and 3,600 by the gate's count, and are sent.
    type(editor, '😀'.repeat(1800));
    await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
    assert.equal(editor.version, 5);
    type(editor, '語'.repeat(3000));
    await waitFor(() => reloads.length === 1 && editor.status === 'synced', 'dropped');
    assert.equal(editor.version, 5);
    assert.equal(editor.error?.code, 'too-large');
    assert.equal(server.server.io.of('/').sockets.size, 1, 'still connected');
    assert.deepEqual(strikes(server), [0]);
  });

  it('drops a step that fits the message size only without the message around it', async (t) => {
    // `{"version":1,"steps":[…]}` adds 24 bytes to its step: a step of 4,090 bytes was sent
    // alone (under the 4,096 of a message), refused too-large by the payload gate, a strike.
    const server = await startServer({ maxMessageBytes: 4096 });
    const { editor, reloads } = editorWithReloads(server.url, 'step-and-envelope');
    const sent: string[] = [];
    editor.socket.onAnyOutgoing((event, payload: unknown) => {
      if (event === 'steps') sent.push(JSON.stringify(payload));
    });
    /// Types a run of x's whose step's JSON is `bytes` long, once what is typed is confirmed.
    const typeStepOf = async (bytes: number): Promise<string> => {
      await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'confirmed');
      const state = editor.state!;
      const at = state.doc.firstChild!.nodeSize - 1;
      const one = JSON.stringify(state.tr.insertText('x', at).steps[0]!.toJSON()).length;
      const text = 'x'.repeat(bytes - one + 1);
      type(editor, text);
      return text;
    };
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await waitFor(() => editor.status === 'synced', 'the editor to join');
    // Exactly a message's worth with its version 0: taken.
    const taken = await typeStepOf(4096 - 24);
    await typeStepOf(4090);
    type(editor, 'after');
    await waitFor(
      () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
      'every step confirmed but the one too large with its message',
    );
    assert.equal(editor.error?.code, 'too-large');
    assert.equal(editor.version, 2);
    assert.equal(editor.state!.doc.textContent, `${taken}after`);
    assert.deepEqual(editor.refusals, {});
    assert.deepEqual(strikes(server), [0]);
    // The first, exactly at the limit, and 'after': the step too large was never sent.
    assert.equal(sent.length, 2);
    assert.equal(sent[0]!.length, 4096);
    assert.ok(sent[1]!.includes('after'));
  });
});

/// Makes `server` answer refusals as servers did before they said how much room the document
/// has left (`room`): the client then learns of each step that does not fit from its refusal.
function withoutRoom(server: TestServer): void {
  server.server.io.on('connection', (socket) => {
    socket.use((packet, next) => {
      const last = packet.length - 1;
      const ack: unknown = packet[last];
      if (packet[0] === 'steps' && typeof ack === 'function') {
        packet[last] = (answer: { room?: unknown }) => {
          const { room: _room, ...older } = answer;
          (ack as (answer: unknown) => void)(older);
        };
      }
      next();
    });
  });
}

/// An editor that fills `docId` on `server` (MAX_DOC_BYTES 4096) to the byte, then types 240
/// keys offline, with the first letter replaced (the same size) after every 20th and one
/// deleted (room for one more key) after every 60th, and comes back. Resolves once it settled,
/// with the text the server should end with (what it takes, in order), the editor's reloads
/// and how often its state was rebuilt meanwhile.
async function fullDocBacklog(
  server: TestServer,
  docId: string,
): Promise<{ editor: CollabClient; expected: string; reloads: Reload[]; rebuilds: number }> {
  let rebuilds = 0;
  const reloads: Reload[] = [];
  const editor = openEditor(server.url, docId, {
    onReload: (info) => reloads.push(info),
    onState: (_state, tr) => {
      if (tr === null) rebuilds++;
    },
  });
  await waitFor(() => editor.status === 'synced', 'the editor to join');
  const { schema } = editor.state!;
  const oneKey = schema.node('doc', null, [schema.node('paragraph', null, [schema.text('x')])]);
  const fill = 'x'.repeat(4096 - nodeStats(oneKey).bytes + 1);
  type(editor, fill);
  await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'filled');
  assert.equal(nodeStats(editor.state!.doc).bytes, 4096);
  editor.socket.disconnect();
  await waitFor(() => editor.status === 'offline', 'offline');
  rebuilds = 0;
  let expected = fill;
  let room = 0;
  for (let i = 0; i < 240; i++) {
    const key = String.fromCharCode(97 + (i % 26));
    type(editor, key);
    if (room > 0) {
      expected += key;
      room--;
    }
    if (i % 20 === 19) {
      const digit = String(i % 10);
      editor.dispatch(editor.state!.tr.insertText(digit, 1, 2));
      expected = digit + expected.slice(1);
    }
    if (i % 60 === 59) {
      editor.dispatch(editor.state!.tr.delete(2, 3));
      expected = expected.slice(0, 1) + expected.slice(2);
      room++;
    }
  }
  editor.socket.connect();
  await waitFor(
    () => editor.status === 'synced' && !editor.hasUnconfirmed,
    'every step confirmed or dropped',
    30_000,
  );
  return { editor, expected, reloads, rebuilds };
}

describe('client: an offline backlog the full document refuses', () => {
  it('drops every step that would grow it past its limit in one go, and keeps each that fits', async (t) => {
    // Each key was once sent alone, refused and dropped on its own: a rebuild of the whole
    // state per key (quadratic: seconds for a few hundred) and a notice per key.
    const server = await startServer({ maxDocBytes: 4096 });
    let editor: CollabClient | null = null;
    t.after(async () => {
      editor?.close();
      await server.close();
    });
    const backlog = await fullDocBacklog(server, 'full-doc');
    editor = backlog.editor;
    assert.equal(editor.state!.doc.textContent, backlog.expected);
    assert.deepEqual((await stored(server.url, 'full-doc')).doc, editor.state!.doc.toJSON());
    // 240 keys, of which 3 fit (one after each deletion but the last, after the last key):
    // 237 dropped, in one notice, from one refusal.
    assert.deepEqual(backlog.reloads, [{ dropped: 237, reason: 'the server refused local steps' }]);
    assert.equal(backlog.rebuilds, 1);
    assert.deepEqual(editor.refusals, { 'too-large': 1 });
    assert.deepEqual(strikes(server), [0]);
  });

  it('keeps the same steps with a server that does not say how much room is left', async (t) => {
    const server = await startServer({ maxDocBytes: 4096 });
    withoutRoom(server);
    let editor: CollabClient | null = null;
    t.after(async () => {
      editor?.close();
      await server.close();
    });
    const backlog = await fullDocBacklog(server, 'full-doc-older');
    editor = backlog.editor;
    assert.equal(editor.state!.doc.textContent, backlog.expected);
    assert.deepEqual((await stored(server.url, 'full-doc-older')).doc, editor.state!.doc.toJSON());
    assert.equal(
      backlog.reloads.reduce((sum, reload) => sum + reload.dropped, 0),
      237,
    );
    assert.deepEqual(strikes(server), [0]);
  });
});
