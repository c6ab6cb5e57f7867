import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createCollab, MemoryStore } from '../../../server/index.js';
import {
  StoreUnavailableError,
  type AppendOutcome,
  type AppendRequest,
  type Snapshot,
  type SnapshotOutcome,
  type StoredDocument,
} from '../../../server/stores/store.js';
import { Random, editRandomly, openEditor } from '../../support/editors.js';
import { SlowStore } from '../../support/slow_store.js';
import { startServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';
import { errors } from '../../../schema/errors.js';
import { type SyncAnswer } from '../../../schema/events.js';

// What a room does when its store misbehaves around snapshots, unloads and repairs: the
// process goes on, nothing waits for ever, and nothing acknowledged is left out of what the
// host is told. Real server, real sockets; the stores are a host's own, over the memory store.

function insert(text: string, at = 1): unknown {
  return { stepType: 'replace', from: at, to: at, slice: { content: [{ type: 'text', text }] } };
}

describe('room failures', () => {
  it('goes on serving when a store throws from snapshot instead of rejecting', async () => {
    /// A host's store with a bug: `snapshot` throws synchronously.
    class ThrowingSnapshots extends MemoryStore {
      attempts = 0;
      override snapshot(): Promise<SnapshotOutcome> {
        this.attempts++;
        throw new Error('a bug in the store');
      }
    }
    const store = new ThrowingSnapshots();
    const server = await startServer(
      { snapshotEveryMs: 100, snapshotEverySteps: 1_000_000 },
      store,
    );
    const editor = openEditor(server.url, 'throwing-snapshots', { clientID: 't' });
    try {
      await editor.ready();
      await editRandomly(editor, new Random(3), 5, 2);
      await editor.settled();
      // The snapshot timer's try threw inside a timer, which ended the process.
      await waitFor(() => store.attempts > 0, 'a snapshot attempt');
      await delay(100);
      await editRandomly(editor, new Random(4), 5, 2);
      await editor.settled();
      assert.equal(server.server.rooms.peek('throwing-snapshots')?.state, 'open');
    } finally {
      editor.close();
      await server.close();
    }
  });

  it('answers a join whose document cannot be loaded unavailable, without the store`s own words', async (t) => {
    // The store's message may name a path or an address inside the network: it belongs in the
    // log, not in an answer to whoever asked.
    class FailingLoads extends MemoryStore {
      override async load(): Promise<never> {
        throw new StoreUnavailableError('EACCES: permission denied, open /srv/secret/data');
      }
    }
    const server = await startServer({}, new FailingLoads());
    const socket = rawSocket(server.url, { doc: 'unloadable' }, { clientID: 'u' });
    t.after(async () => {
      socket.close();
      await server.close();
    });
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const answer = await ask<SyncAnswer>(socket, 'join', {});
    assert.ok(!answer.ok);
    assert.equal(answer.code, 'unavailable');
    assert.equal(answer.message, errors.unavailable.message);
  });

  it('retries a failing snapshot after a wait, not in a busy loop', async (t) => {
    class FailingSnapshots extends MemoryStore {
      attempts = 0;
      override async snapshot(): Promise<SnapshotOutcome> {
        this.attempts++;
        throw new StoreUnavailableError('the disk is full');
      }
    }
    const store = new FailingSnapshots();
    const server = await startServer(
      { snapshotEveryMs: 200, snapshotEverySteps: 1_000_000 },
      store,
    );
    const editor = openEditor(server.url, 'failing-snapshots', { clientID: 'f' });
    t.after(async () => {
      editor.close();
      await server.close();
    });
    await editor.ready();
    await editRandomly(editor, new Random(5), 3, 2);
    await editor.settled();
    await waitFor(() => store.attempts > 0, 'a snapshot attempt');
    await delay(1500);
    // Every 200 ms at most: seven or eight. The old room asked again at once, ~850 a second.
    assert.ok(store.attempts <= 12, `${store.attempts} snapshot attempts in 1.5 s`);
    assert.ok(store.attempts >= 3, 'the snapshot is still retried');
  });

  it('settles a room whose append finds the store behind while it already restores its copy', async (t) => {
    /// The store goes back to version 1 once armed: loads answer v1, a snapshot finds the lease
    /// gone, and an append in flight comes back as a conflict at v1.
    class RegressingStore extends MemoryStore {
      armed = false;
      slowConflict = false;
      override async load(docId: string): Promise<StoredDocument | null> {
        const stored = await super.load(docId);
        if (!this.armed || !stored) return stored;
        return {
          ...stored,
          version: 1,
          journal: stored.journal.filter((entry) => entry.baseVersion + entry.steps.length <= 1),
        };
      }
      override async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
        if (!this.armed) return super.snapshot(docId, snapshot);
        await delay(100);
        return { ok: false, reason: 'lost' };
      }
      override async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
        if (!this.slowConflict) return super.append(docId, request);
        await delay(400);
        return { ok: false, reason: 'conflict', version: 1, epoch: request.epoch };
      }
    }
    const store = new RegressingStore();
    const server = await startServer({ snapshotEverySteps: 2 }, store);
    const a = rawSocket(server.url, 'wedge', 'a');
    t.after(async () => {
      a.close();
      await server.close();
    });
    await ask(a, 'join', {});
    assert.deepEqual(await ask(a, 'steps', { version: 0, steps: [insert('x')] }), {
      ok: true,
      version: 1,
    });
    // Version 2 starts a snapshot, which finds the lease gone and the store behind.
    store.armed = true;
    assert.deepEqual(await ask(a, 'steps', { version: 1, steps: [insert('y')] }), {
      ok: true,
      version: 2,
    });
    // In flight meanwhile: an append that comes back as a conflict with the store behind.
    store.slowConflict = true;
    // (Its answer is lost: the repair sends the editors away before the append comes back.)
    a.emit('steps', { version: 2, steps: [insert('z')] }, () => {});
    await delay(20);
    const room = server.server.rooms.peek('wedge')!;
    let idle = false;
    void room.whenIdle().then(() => (idle = true));
    // Shutdown, a hand-over and making space wait on this; it used to wait for ever.
    await waitFor(() => idle, 'the room to settle', 5000);
    assert.equal(room.state, 'closed');
  });

  it('answers a snapshot asked for while an older one is written only once the newer version is stored', async (t) => {
    const store = new SlowStore({ snapshotMs: 200 });
    const server = await startServer({ snapshotEverySteps: 1_000_000 }, store);
    const a = rawSocket(server.url, 'snapshots', 'a');
    t.after(async () => {
      a.close();
      await server.close();
    });
    await ask(a, 'join', {});
    assert.deepEqual(await ask(a, 'steps', { version: 0, steps: [insert('x')] }), {
      ok: true,
      version: 1,
    });
    const room = server.server.rooms.peek('snapshots')!;
    const older = room.snapshot();
    assert.deepEqual(await ask(a, 'steps', { version: 1, steps: [insert('y')] }), {
      ok: true,
      version: 2,
    });
    // What an unload or a shutdown asks: it used to get the answer of the one at version 1.
    assert.equal(await room.snapshot(), true);
    assert.equal(await older, true);
    assert.equal((await store.load('snapshots'))?.snapshot?.version, 2);
    assert.equal(room.needsSnapshot, false);
  });

  it('does not unload a document while a batch is being journaled: the host is told of it', async (t) => {
    let snapshotEntered: () => void = () => {};
    /// Snapshots take 100 ms; appends land at once but take 300 ms to confirm (a slow sync).
    class SlowSyncStore extends MemoryStore {
      override async snapshot(docId: string, snapshot: Snapshot): Promise<SnapshotOutcome> {
        snapshotEntered();
        await delay(100);
        return super.snapshot(docId, snapshot);
      }
      override async append(docId: string, request: AppendRequest): Promise<AppendOutcome> {
        const outcome = await super.append(docId, request);
        await delay(300);
        return outcome;
      }
    }
    const events: string[] = [];
    const collab = createCollab({
      store: new SlowSyncStore(),
      authenticate: null,
      limits: { idleUnloadMs: 200 },
      onUnload: (event) => void events.push(`unload@${event.version}`),
      onAccepted: (event) => void events.push(`accepted@${event.version}`),
    });
    t.after(() => collab.close());
    const entered = new Promise<void>((resolve) => (snapshotEntered = resolve));
    assert.equal(await collab.change('d', (tr) => tr.insert(1, collab.schema.text('A'))), 1);
    // The idle unload writes its snapshot; a change comes while it does.
    await entered;
    assert.equal(await collab.change('d', (tr) => tr.insert(2, collab.schema.text('B'))), 2);
    await waitFor(() => events.some((event) => event.startsWith('unload')), 'the unload', 5000);
    assert.deepEqual(events, ['accepted@1', 'accepted@2', 'unload@2']);
    const stored = await collab.document('d');
    assert.equal(stored?.doc.textContent, 'AB');
  });
});
