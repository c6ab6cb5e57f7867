import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryStore } from '../../../server/stores/memory_store.js';
import {
  StoreUnavailableError,
  type Snapshot,
  type SnapshotOutcome,
  type StoredDocument,
} from '../../../server/stores/store.js';
import { Random, editRandomly, openEditor } from '../../support/editors.js';
import { SlowStore } from '../../support/slow_store.js';
import { startServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

/// A memory store that counts loads and can be told to fail its snapshot writes, as a store
/// whose disk or network is gone would.
class FaultyStore extends MemoryStore {
  loads = 0;
  failSnapshots = false;
  override async load(docId: string): Promise<StoredDocument | null> {
    this.loads++;
    // A slow load is the behaviour: concurrent joins arrive while it is under way.
    await delay(30);
    return super.load(docId);
  }
  override async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
    if (this.failSnapshots) throw new StoreUnavailableError('snapshot refused by the test');
    return super.snapshot(docId, snapshot);
  }
}

describe('document lifecycle', () => {
  it('concurrent joins of one document share one load', async (t) => {
    const store = new FaultyStore();
    const server = await startServer({}, store);
    const editors = Array.from({ length: 8 }, (_, i) =>
      openEditor(server.url, 'shared-load', { clientID: `l${i}` }),
    );
    t.after(async () => {
      for (const editor of editors) editor.close();
      await server.close();
    });
    await Promise.all(editors.map((editor) => editor.ready()));
    assert.equal(store.loads, 1);
    const epochs = new Set(editors.map((editor) => editor.epoch));
    assert.equal(epochs.size, 1, 'every editor got the same fresh document');
  });

  it('writes a snapshot every N steps and trims the journal up to it', async (t) => {
    const store = new MemoryStore();
    const server = await startServer({ snapshotEverySteps: 10 }, store);
    const editor = openEditor(server.url, 'every-n', { clientID: 'n' });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await editor.ready();
    await editRandomly(editor, new Random(5), 40, 2);
    await editor.settled();
    await waitFor(
      () => (server.server.rooms.peek('every-n')?.snapshotVersion ?? 0) >= 10,
      'a snapshot',
    );
    const stored = await store.load('every-n');
    assert.ok(stored?.snapshot && stored.snapshot.version >= 10);
    for (const entry of stored.journal) {
      assert.ok(
        entry.baseVersion + entry.steps.length > stored.snapshot.version,
        'covered entries are trimmed',
      );
    }
  });

  it('writes a snapshot T milliseconds after the first unsnapshotted step', async () => {
    const store = new MemoryStore();
    const server = await startServer(
      { snapshotEverySteps: 1_000_000, snapshotEveryMs: 200 },
      store,
    );
    const editor = openEditor(server.url, 'every-t', { clientID: 't' });
    try {
      await editor.ready();
      await editRandomly(editor, new Random(6), 5, 2);
      await editor.settled();
      await waitFor(
        () => server.server.rooms.peek('every-t')?.needsSnapshot === false,
        'the timed snapshot',
        3000,
      );
      const stored = await store.load('every-t');
      assert.equal(stored?.snapshot?.version, editor.version);
    } finally {
      editor.close();
      await server.close();
    }
  });

  it('shutting down during an append still delivers its acknowledgement and the closing notice', async (t) => {
    const server = await startServer({}, new SlowStore({ appendMs: 300 }));
    const socket = rawSocket(server.url, 'shutdown-ack', 'a');
    t.after(async () => {
      socket.close();
      await server.close();
    });
    await ask(socket, 'join', {});
    const heard: string[] = [];
    socket.on('closing', (notice: { code: string }) => heard.push(`closing:${notice.code}`));
    const acknowledged = new Promise<unknown>((resolve) =>
      socket.emit(
        'steps',
        {
          version: 0,
          steps: [
            {
              stepType: 'replace',
              from: 1,
              to: 1,
              slice: { content: [{ type: 'text', text: 'A' }] },
            },
          ],
        },
        resolve,
      ),
    );
    await delay(50);
    await server.close();
    // Written just before the server closed its sockets: discarded with them, before.
    assert.deepEqual(await Promise.race([acknowledged, delay(1000).then(() => 'lost')]), {
      ok: true,
      version: 1,
    });
    await waitFor(() => heard.length > 0, 'the closing notice', 1000);
    assert.deepEqual(heard, ['closing:shutting-down']);
  });

  it('unloads an idle document once its snapshot is written, and keeps it while the write fails', async (t) => {
    const store = new FaultyStore();
    const server = await startServer({ idleUnloadMs: 100, snapshotEverySteps: 1_000_000 }, store);
    const editor = openEditor(server.url, 'idle', { clientID: 'i' });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await editor.ready();
    await editRandomly(editor, new Random(7), 10, 2);
    await editor.settled();
    const version = editor.version;
    store.failSnapshots = true;
    editor.close();
    await waitFor(() => server.server.io.engine.clientsCount === 0, 'the socket to leave');
    // Nothing to wait for: the document must stay loaded while its snapshot keeps failing.
    await delay(400);
    assert.ok(server.server.rooms.peek('idle'), 'a document whose snapshot failed stays loaded');
    store.failSnapshots = false;
    await waitFor(
      () => server.server.rooms.peek('idle') === undefined,
      'the document to unload',
      3000,
    );
    const stored = await store.load('idle');
    assert.equal(stored?.snapshot?.version, version);
    assert.deepEqual(stored?.journal, []);
    // Loading it again gives the same document at the same version.
    const again = openEditor(server.url, 'idle', { clientID: 'i2' });
    await again.ready();
    assert.equal(again.version, version);
    again.close();
  });
});
