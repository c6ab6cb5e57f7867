import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { emptyDoc, schema, schemaVersion } from '../../schema/index.js';
import { type StepJSON } from '../../schema/events.js';
import { loadConfig, type Config } from '../../server/config.js';
import { CorruptDocumentError, TooManyDocumentsError } from '../../server/rooms/load_errors.js';
import { Rooms } from '../../server/rooms/registry.js';
import { restoreDocument } from '../../server/rooms/restore.js';
import type { RoomHooks } from '../../server/rooms/room_hooks.js';
import { MemoryStore } from '../../server/stores/memory_store.js';
import type { StoredDocument } from '../../server/stores/store.js';
import { waitFor } from '../support/wait.js';

// The registry on a real MemoryStore, without leases (one process): shared loads, unloads
// (idle, and least recently used for a new document), and quarantine of damaged data.

const log = pino({ level: 'silent' });

/// A registry on `store` whose hooks note each load and unload as `<load|unload> <doc>`.
function registry(store: MemoryStore, events: string[], overrides: Partial<Config> = {}): Rooms {
  const config = loadConfig({ host: '127.0.0.1', port: 0, ...overrides });
  const hooks: RoomHooks = {
    loaded: async (room) => void events.push(`load ${room.docId}`),
    unloaded: (room) => void events.push(`unload ${room.docId}`),
  };
  return new Rooms({
    store,
    schema,
    transport: { broadcast() {}, evict() {} },
    observer: null,
    log,
    options: { ...config, schemaVersion },
    hooks,
  });
}

/// A step typing `text` at the start of the document.
function typing(text: string): StepJSON {
  return { stepType: 'replace', from: 1, to: 1, slice: { content: [{ type: 'text', text }] } };
}

describe('Rooms', () => {
  it('shares one load among concurrent callers', async () => {
    const events: string[] = [];
    const rooms = registry(new MemoryStore(), events);
    const [a, b] = await Promise.all([rooms.get('shared', true), rooms.get('shared', true)]);
    assert.ok(a);
    assert.equal(a, b);
    assert.deepEqual(events, ['load shared']);
    assert.equal(rooms.size, 1);
    rooms.closeAll();
  });

  it('answers a read of an unknown document null, and loads nothing for it', async () => {
    const events: string[] = [];
    const store = new MemoryStore();
    const rooms = registry(store, events);
    assert.equal(await rooms.get('nobody', false), null);
    assert.equal(rooms.size, 0);
    assert.deepEqual(events, []);
    assert.equal(await store.load('nobody'), null);
    rooms.closeAll();
  });

  it('unloads the least recently used room without sockets to load another', async () => {
    const events: string[] = [];
    const rooms = registry(new MemoryStore(), events, { maxLoadedDocuments: 2 });
    await rooms.get('a', true);
    await rooms.get('b', true);
    await rooms.get('a', true); // a is now the most recently used
    await rooms.get('c', true);
    assert.equal(rooms.peek('b'), undefined, 'b went');
    assert.ok(rooms.peek('a') && rooms.peek('c'));
    assert.deepEqual(events, ['load a', 'load b', 'unload b', 'load c']);
    rooms.closeAll();
  });

  it('refuses a new document when every held room has sockets', async () => {
    const rooms = registry(new MemoryStore(), [], { maxLoadedDocuments: 1 });
    rooms.attach((await rooms.get('busy', true))!);
    await assert.rejects(rooms.get('other', true), TooManyDocumentsError);
    assert.equal(rooms.size, 1);
    rooms.closeAll();
  });

  it('unloads a room left idle once its snapshot is written', async () => {
    const events: string[] = [];
    const store = new MemoryStore();
    const rooms = registry(store, events, { idleUnloadMs: 20 });
    const room = (await rooms.get('idle', true))!;
    rooms.attach(room);
    const answer = await new Promise((resolve) =>
      room.receive(0, [typing('kept')], 'a', resolve, performance.now()),
    );
    assert.deepEqual(answer, { ok: true, version: 1 });
    rooms.detach(room);
    await waitFor(() => rooms.peek('idle') === undefined, 'the idle room unloaded');
    assert.equal(room.state, 'closed');
    assert.deepEqual(events, ['load idle', 'unload idle']);
    const stored = await store.load('idle');
    assert.equal(stored?.snapshot?.version, 1, 'snapshotted before it went');
    // Loaded again, it holds what was typed.
    const again = (await rooms.get('idle', false))!;
    assert.notEqual(again, room);
    assert.equal(again.publishedDoc.textContent, 'kept');
    rooms.closeAll();
  });

  it('does not confirm a closed room for a read', async () => {
    const rooms = registry(new MemoryStore(), []);
    const room = (await rooms.get('confirmed', true))!;
    await rooms.confirm(room);
    room.close();
    await assert.rejects(rooms.confirm(room), { code: 'moved' });
    rooms.closeAll();
  });

  it('quarantines a document whose stored journal does not apply', async () => {
    const store = new MemoryStore();
    // A step past the end of the document: stored by something that did not check it.
    await store.append('damaged', {
      epoch: 'e',
      baseVersion: 0,
      steps: [{ ...typing('x'), from: 40, to: 40 }],
      clientIDs: ['a'],
    });
    const rooms = registry(store, []);
    await assert.rejects(rooms.get('damaged', true), CorruptDocumentError);
    assert.equal(rooms.quarantinedCount, 1);
    assert.equal(rooms.corruptLoads, 1);
    // Repaired meanwhile, it is still refused until the quarantine ends, without a read.
    await store.reset(
      'damaged',
      { doc: emptyDoc().toJSON(), version: 0, epoch: 'f', schemaVersion, savedAt: Date.now() },
      { epoch: 'e', version: 1 },
    );
    await assert.rejects(rooms.get('damaged', true), CorruptDocumentError);
    assert.equal(rooms.corruptLoads, 1, 'the store was not read again');
    assert.equal(rooms.size, 0);
    // Other documents are unaffected.
    assert.ok(await rooms.get('healthy', true));
    rooms.closeAll();
  });
});

describe('restoreDocument', () => {
  const options = { ...loadConfig({ host: '127.0.0.1', port: 0 }), schemaVersion };
  const stored = (journal: StoredDocument['journal'], version: number): StoredDocument => ({
    epoch: 'e',
    version,
    snapshot: null,
    journal,
  });

  it('replays the journal, keeping the last batch of each client', () => {
    const restored = restoreDocument(
      'ok',
      stored(
        [
          { baseVersion: 0, steps: [typing('a')], clientIDs: ['x'] },
          { baseVersion: 1, steps: [typing('b')], clientIDs: ['y'] },
        ],
        2,
      ),
      schema,
      options,
    );
    assert.equal(restored.authority.version, 2);
    assert.equal(restored.authority.doc.textContent, 'ba');
    assert.deepEqual(
      [...restored.clients],
      [
        ['x', 1],
        ['y', 2],
      ],
    );
  });

  it('refuses a journal with a gap, and one that ends elsewhere than the store says', () => {
    assert.throws(
      () =>
        restoreDocument(
          'gap',
          stored(
            [
              { baseVersion: 0, steps: [typing('a')], clientIDs: ['x'] },
              { baseVersion: 2, steps: [typing('b')], clientIDs: ['x'] },
            ],
            3,
          ),
          schema,
          options,
        ),
      CorruptDocumentError,
    );
    assert.throws(
      () =>
        restoreDocument(
          'short',
          stored([{ baseVersion: 0, steps: [typing('a')], clientIDs: ['x'] }], 2),
          schema,
          options,
        ),
      /journal ends at 1, the store says 2/,
    );
  });

  it('refuses a snapshot written by a newer schema', () => {
    const snapshot = {
      doc: emptyDoc().toJSON(),
      version: 0,
      epoch: 'e',
      schemaVersion: schemaVersion + 1,
      savedAt: 0,
    };
    assert.throws(
      () => restoreDocument('newer', { ...stored([], 0), snapshot }, schema, options),
      /schema version/,
    );
  });
});
