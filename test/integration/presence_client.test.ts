import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Presence, remoteCursors, type CollabClient } from '../../client/index.js';
import type { SyncAnswer } from '../../schema/index.js';
import { openEditor } from '../support/editors.js';
import { startServer, type TestServer } from '../support/server.js';
import { rawSocket } from '../support/socket.js';
import { waitFor } from '../support/wait.js';

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

  it('maps a presence sent at an older version through the steps confirmed since', async () => {
    const docId = 'presence-client-old';
    const viewer = editorWithPresence(server.url, docId, 'Viewer');
    const writer = editorWithPresence(server.url, docId, 'Writer');
    const raw = rawSocket(server.url, docId, 'raw');
    try {
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
    } finally {
      raw.close();
      viewer.close();
      writer.close();
    }
  });

  it('shows a caret whose name or colour the server would refuse, fixed up, instead of failing', async () => {
    // The server takes names of up to 64 characters and colours as #rrggbb, and counts every
    // other presence as a protocol error until it closes the connection: given as is to the
    // constructor, they ended the editor's session.
    const docId = 'presence-client-identity';
    const viewer = editorWithPresence(server.url, docId, 'Viewer');
    const long = editorWithPresence(server.url, docId, 'L'.repeat(68), '#f00');
    try {
      await Promise.all([viewer.ready(), long.ready()]);
      long.dispatch(long.state!.tr.insertText('Hi', 1));
      const cursor = () => remoteCursors(viewer.state!).find((c) => c.clientID === long.clientID);
      await waitFor(() => cursor()?.head === 3, 'the caret after Hi');
      assert.equal(cursor()!.name, 'L'.repeat(64));
      assert.match(cursor()!.color, /^#[0-9a-f]{6}$/i);
      assert.equal(long.status, 'synced');
      assert.equal(long.error, null);
    } finally {
      viewer.close();
      long.close();
    }
  });
});
