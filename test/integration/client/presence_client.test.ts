import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { EditorState, TextSelection } from 'prosemirror-state';
import { Server, type Socket as ServerSocket } from 'socket.io';
import { Presence, remoteCursors, type CollabClient } from '../../../client/index.js';
import { schema } from '../../../schema/index.js';
import { type SyncAnswer } from '../../../schema/events.js';
import { openEditor } from '../../support/editors.js';
import { SlowStore } from '../../support/slow_store.js';
import { startServer, type TestServer } from '../../support/server.js';
import { rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

/// A headless editor with the presence plugin wired as the browser editor wires it.
function editorWithPresence(
  url: string,
  docId: string,
  name: string,
  color = '#112233',
): CollabClient {
  const presence = new Presence({ name, color });
  const client = openEditor(url, docId, {
    plugins: [presence.plugin],
    onState: (state, tr) => presence.stateChanged(state, tr),
    onStatus: (status) => presence.statusChanged(status),
  });
  presence.connect(client);
  return client;
}

describe('presence in the client', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('maps a presence sent at an older version through the steps confirmed since', async (t) => {
    const docId = 'presence-client-old';
    const viewer = editorWithPresence(server.url, docId, 'Viewer');
    const writer = editorWithPresence(server.url, docId, 'Writer');
    const raw = rawSocket(server.url, docId, 'raw');
    t.after(() => {
      raw.close();
      viewer.close();
      writer.close();
    });
    await Promise.all([viewer.ready(), writer.ready()]);
    await new Promise<SyncAnswer>((resolve) => raw.emit('join', {}, resolve));
    writer.dispatch(writer.state!.tr.insertText('Hello', 1));
    await waitFor(() => viewer.version === 1, 'the viewer to receive the step');
    // Reported at version 0, before "Hello" was typed where this caret stands.
    raw.emit('presence', { version: 0, anchor: 1, head: 1, name: 'Raw', color: '#aa0000' });
    const rawCursor = () => remoteCursors(viewer.state!).find((c) => c.clientID === 'raw');
    await waitFor(() => rawCursor() !== undefined, 'the raw presence to be shown');
    assert.equal(rawCursor()!.head, 6, 'mapped past the text inserted since version 0');

    // Writer's own caret (after "Hello") reaches the viewer too, at the same place.
    const writerCursor = () =>
      remoteCursors(viewer.state!).find((c) => c.clientID === writer.clientID);
    await waitFor(() => writerCursor()?.head === 6, "the writer's caret after Hello");

    raw.close();
    await waitFor(() => rawCursor() === undefined, 'the raw presence to leave');
  });

  it("draws an editor's caret before text another typed right at it, where that editor has it", async (t) => {
    const docId = 'presence-client-same-spot';
    const ada = editorWithPresence(server.url, docId, 'Ada');
    const bob = editorWithPresence(server.url, docId, 'Bob');
    const carol = editorWithPresence(server.url, docId, 'Carol');
    t.after(() => {
      for (const editor of [ada, bob, carol]) editor.close();
    });
    await Promise.all([ada.ready(), bob.ready(), carol.ready()]);
    ada.dispatch(ada.state!.tr.insertText('abc', 1));
    await waitFor(() => bob.version === 1 && carol.version === 1, 'abc everywhere');
    // Both carets at the end of "abc"; Bob types there.
    ada.dispatch(ada.state!.tr.setSelection(TextSelection.create(ada.state!.doc, 4)));
    bob.dispatch(bob.state!.tr.setSelection(TextSelection.create(bob.state!.doc, 4)));
    const adaIn = (editor: CollabClient) =>
      remoteCursors(editor.state!).find((c) => c.clientID === ada.clientID)?.head;
    // Past the throttle window: Ada's presence at version 1 has gone out.
    await delay(200);
    assert.equal(adaIn(bob), 4);
    bob.dispatch(bob.state!.tr.insertText('XYZ'));
    await waitFor(() => ada.version === 2 && carol.version === 2, 'XYZ everywhere');
    // Ada's own caret stays before "XYZ" (prosemirror-collab maps it backward); the others
    // draw it there too, not after the text.
    assert.equal(ada.state!.selection.head, 4);
    await waitFor(() => adaIn(bob) === 4 && adaIn(carol) === 4, "Ada's caret before XYZ");
    await delay(200);
    assert.equal(adaIn(bob), 4);
    assert.equal(adaIn(carol), 4);
  });

  it('draws a caret moved inside text its editor has not had confirmed where it is, once confirmed', async (t) => {
    // "Hello world" takes 300 ms to be confirmed; meanwhile its writer moves the caret back
    // after "Hello". Mapped back through the unconfirmed step, that caret is the insertion's
    // start, which receivers map to the end of "Hello world": sent again once confirmed.
    const slow = await startServer({}, new SlowStore({ appendMs: 300, marker: 'Hello world' }));
    const docId = 'presence-client-unconfirmed';
    const writer = editorWithPresence(slow.url, docId, 'Writer');
    const viewer = editorWithPresence(slow.url, docId, 'Viewer');
    t.after(async () => {
      writer.close();
      viewer.close();
      await slow.close();
    });
    await Promise.all([writer.ready(), viewer.ready()]);
    writer.dispatch(writer.state!.tr.insertText('Hello world', 1));
    writer.dispatch(writer.state!.tr.setSelection(TextSelection.create(writer.state!.doc, 6)));
    assert.ok(writer.hasUnconfirmed);
    const drawn = () =>
      remoteCursors(viewer.state!).find((c) => c.clientID === writer.clientID)?.head;
    await waitFor(() => viewer.version === 1, 'the step confirmed');
    await waitFor(() => drawn() === 6, 'the caret after Hello');
  });

  it('keeps a remote caret in its place through a reload to a whole document', async (t) => {
    // A scripted peer on a real Socket.io server: an idle editor's caret between "abc" and
    // "def" at version 0, text typed in front of it, then a broadcast with a gap that the
    // server can only fill with the whole document. The reload started the presence plugin
    // afresh and placed the caret from its presence at version 0 again, unmapped.
    const paragraph = (text: string) =>
      schema.node('doc', null, [schema.node('paragraph', null, [schema.text(text)])]);
    const doc0 = paragraph('abcdef');
    const xyz = EditorState.create({ doc: doc0 }).tr.insertText('XYZ', 1).steps[0]!;
    const doc1 = xyz.apply(doc0).doc!;
    const bang = EditorState.create({ doc: doc1 }).tr.insertText('!', 10).steps[0]!;
    const doc2 = bang.apply(doc1).doc!;
    const http = createServer();
    const io = new Server(http);
    const peers: ServerSocket[] = [];
    io.on('connection', (socket) => {
      peers.push(socket);
      socket.on('join', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
        ack({ ok: true, epoch: 'e', version: 0, doc: doc0.toJSON() }),
      );
      socket.on('pull', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
        ack({ ok: true, epoch: 'e', version: 2, doc: doc2.toJSON() }),
      );
      socket.on('presence', () => {});
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    const viewer = editorWithPresence(url, 'reload', 'Viewer');
    const bob = () => remoteCursors(viewer.state!).find((c) => c.clientID === 'bob');
    const textBeforeBob = () => viewer.state!.doc.textBetween(0, bob()!.head);
    t.after(() => {
      viewer.close();
      io.close();
    });
    await viewer.ready();
    const color = '#2e86ab';
    peers[0]!.emit('presence', {
      clientID: 'bob',
      version: 0,
      anchor: 4,
      head: 4,
      name: 'Bob',
      color,
    });
    await waitFor(() => bob()?.head === 4, "Bob's caret");
    peers[0]!.emit('steps', { version: 1, steps: [xyz.toJSON()], clientIDs: ['other'] });
    await waitFor(() => viewer.version === 1, 'XYZ');
    assert.equal(textBeforeBob(), 'XYZabc');
    peers[0]!.emit('steps', { version: 3, steps: [bang.toJSON()], clientIDs: ['other'] });
    await waitFor(() => viewer.version === 2, 'the reload');
    assert.equal(viewer.state!.doc.textContent, 'XYZabcdef!');
    assert.equal(textBeforeBob(), 'XYZabc');
  });

  it('shows a caret whose name or colour the server would refuse, fixed up, instead of failing', async (t) => {
    // The server takes names of up to 64 characters and colours as #rrggbb, and counts every
    // other presence as a protocol error until it closes the connection: given as is to the
    // constructor, they ended the editor's session.
    const docId = 'presence-client-identity';
    const viewer = editorWithPresence(server.url, docId, 'Viewer');
    const long = editorWithPresence(server.url, docId, 'L'.repeat(68), '#f00');
    t.after(() => {
      viewer.close();
      long.close();
    });
    await Promise.all([viewer.ready(), long.ready()]);
    long.dispatch(long.state!.tr.insertText('Hi', 1));
    const cursor = () => remoteCursors(viewer.state!).find((c) => c.clientID === long.clientID);
    await waitFor(() => cursor()?.head === 3, 'the caret after Hi');
    assert.equal(cursor()!.name, 'L'.repeat(64));
    assert.match(cursor()!.color, /^#[0-9a-f]{6}$/i);
    assert.equal(long.status, 'synced');
    assert.equal(long.error, null);
  });
});
