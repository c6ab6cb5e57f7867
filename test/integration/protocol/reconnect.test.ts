import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Random, editRandomly, openEditor, waitConverged } from '../../support/editors.js';
import { startServer, type TestServer } from '../../support/server.js';
import { waitFor } from '../../support/wait.js';

describe('reconnect', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('an editor that goes offline keeps editing and everyone converges after it returns', async (t) => {
    const docId = 'reconnect-offline';
    const editors = [0, 1, 2].map((i) => openEditor(server.url, docId, { clientID: `off-${i}` }));
    t.after(() => {
      for (const editor of editors) editor.close();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    const [offline, ...others] = editors as [(typeof editors)[0], ...typeof editors];
    await editRandomly(offline, new Random(1), 10, 5);
    await offline.settled();
    offline.socket.disconnect();
    await waitFor(() => offline.status === 'offline', 'the editor to be offline');
    const versionAtLeave = offline.version;
    await Promise.all([
      editRandomly(offline, new Random(2), 25, 5),
      ...others.map((editor, i) => editRandomly(editor, new Random(10 + i), 25, 5)),
    ]);
    assert.equal(offline.version, versionAtLeave, 'an offline editor receives nothing');
    assert.ok(offline.hasUnconfirmed, 'offline edits wait to be sent');
    offline.socket.connect();
    const room = () => server.server.rooms.peek(docId)!;
    await waitConverged(editors, () => room().publishedVersion);
    for (const editor of editors) assert.ok(editor.state!.doc.eq(room().publishedDoc));
    assert.ok(offline.state!.doc.textContent.length > 0);
  });

  it('an editor whose connection drops reconnects by itself, catches up by steps and resends', async (t) => {
    const docId = 'reconnect-drop';
    let reloads = 0;
    const editors = [0, 1].map((i) =>
      openEditor(server.url, docId, { clientID: `drop-${i}`, onReload: () => reloads++ }),
    );
    t.after(() => {
      for (const editor of editors) editor.close();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    const [dropped, other] = editors as [(typeof editors)[0], (typeof editors)[0]];
    await editRandomly(dropped, new Random(3), 10, 2);
    // Kill the transport under the socket, as a network failure would.
    dropped.socket.io.engine.close();
    await Promise.all([
      editRandomly(dropped, new Random(4), 15, 3),
      editRandomly(other, new Random(5), 15, 3),
    ]);
    const room = () => server.server.rooms.peek(docId)!;
    await waitConverged(editors, () => room().publishedVersion);
    assert.ok(dropped.reconnects >= 1, 'the editor reconnected');
    assert.equal(reloads, 0, 'caught up by steps, without reloading the document');
    for (const editor of editors) assert.ok(editor.state!.doc.eq(room().publishedDoc));
  });
});
