import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { emptyDoc, schemaVersion } from '../../schema/index.js';
import { type ErrorCode } from '../../schema/errors.js';
import { type StepJSON, type StepsAnswer, type StepsBroadcast } from '../../schema/events.js';
import { loadConfig } from '../../server/config.js';
import { Authority } from '../../server/core/authority.js';
import { Room, type RoomEvents } from '../../server/rooms/room.js';
import { leaseRetryMs, type RoomTransport } from '../../server/rooms/room_options.js';
import { MemoryStore } from '../../server/stores/memory_store.js';

// One room on a real MemoryStore: its group commit, its answers, its snapshots and its lease
// state. No sockets: what the room sends is kept by a transport that records it.

const log = pino({ level: 'silent' });
const config = loadConfig({ host: '127.0.0.1', port: 0 });
const options = { ...config, schemaVersion, flushIntervalMs: 0 };

/// What a room sent: broadcasts and evictions in order, and every answer.
interface Sent {
  events: string[];
  answers: StepsAnswer[];
  closed: number;
  stale: number;
}

/// A room of `docId` on `store`, at the store's version 0, with a recording transport.
function roomOn(store: MemoryStore, docId: string): { room: Room; sent: Sent } {
  const sent: Sent = { events: [], answers: [], closed: 0, stale: 0 };
  const transport: RoomTransport = {
    broadcast: (_docId: string, message: StepsBroadcast) =>
      void sent.events.push(`broadcast ${message.version} ${message.clientIDs.join(',')}`),
    evict: (_docId: string, code: ErrorCode) => void sent.events.push(`evict ${code}`),
  };
  const events: RoomEvents = {
    closed: () => void sent.closed++,
    leaseStale: () => void sent.stale++,
  };
  const authority = new Authority(emptyDoc(), 0, config);
  const room = new Room(docId, 'epoch-1', authority, 0, {
    store,
    transport,
    observer: null,
    log,
    options,
    events,
  });
  return { room, sent };
}

/// A step typing `text` at the start of the document.
function typing(text: string): StepJSON {
  return { stepType: 'replace', from: 1, to: 1, slice: { content: [{ type: 'text', text }] } };
}

/// Sends `text` as a batch of `clientID` at the room's newest version; resolves with the answer,
/// noted in `sent`.
function send(room: Room, sent: Sent, clientID: string, text: string): Promise<StepsAnswer> {
  return new Promise((resolve) => {
    room.receive(
      room.current().version,
      [typing(text)],
      clientID,
      (answer) => {
        sent.events.push(`ack ${clientID} ${answer.ok ? 'ok' : answer.code}`);
        sent.answers.push(answer);
        resolve(answer);
      },
      performance.now(),
    );
  });
}

describe('Room', () => {
  it('journals the batches of one turn as one entry, broadcasts once, then acknowledges', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'group');
    const answers = await Promise.all([send(room, sent, 'a', 'x'), send(room, sent, 'b', 'y')]);
    assert.deepEqual(answers, [
      { ok: true, version: 1 },
      { ok: true, version: 2 },
    ]);
    assert.deepEqual(sent.events, ['broadcast 2 a,b', 'ack a ok', 'ack b ok']);
    const stored = await store.load('group');
    assert.equal(stored?.journal.length, 1, 'one append for the group');
    assert.deepEqual(stored?.journal[0]?.clientIDs, ['a', 'b']);
    assert.equal(room.publishedVersion, 2);
    assert.equal(room.publishedDoc.textContent, 'yx');
  });

  it('refuses the whole group when the append is refused, and acknowledges none of it', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'refused');
    // Another writer extends the document first: the room's append is a conflict.
    await store.append('refused', {
      epoch: 'epoch-1',
      baseVersion: 0,
      steps: [typing('other')],
      clientIDs: ['elsewhere'],
    });
    const answers = await Promise.all([send(room, sent, 'a', 'x'), send(room, sent, 'b', 'y')]);
    assert.deepEqual(
      answers.map((answer) => !answer.ok && answer.code),
      ['stale', 'stale'],
    );
    assert.ok(!sent.events.some((event) => event.startsWith('broadcast')), 'nothing broadcast');
    assert.ok(sent.events.includes('evict stale'), 'the editors are sent to reload');
    assert.equal(room.state, 'closed');
    assert.equal(sent.closed, 1, 'the registry is told once');
    assert.equal(room.publishedVersion, 0, 'nothing was published');
    const stored = await store.load('refused');
    assert.equal(stored?.version, 1, 'none of the group reached the store');
    assert.deepEqual(stored?.journal[0]?.clientIDs, ['elsewhere']);
  });

  it('refuses a batch the authority refuses, at once and alone', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'invalid');
    const answer = await new Promise<StepsAnswer>((resolve) =>
      room.receive(0, [{ stepType: 'nonsense' }], 'a', resolve, performance.now()),
    );
    assert.equal(!answer.ok && answer.code, 'invalid-step');
    assert.equal(await store.load('invalid'), null, 'nothing was journaled');
    assert.deepEqual(sent.events, []);
    assert.equal(room.state, 'open');
  });

  it('answers a sync with the steps since a version, or the document and the ledger', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'sync');
    await send(room, sent, 'a', 'x');
    await send(room, sent, 'b', 'y');
    const since = room.sync({ version: 1, epoch: 'epoch-1' });
    assert.ok(since.ok && 'steps' in since);
    assert.deepEqual(since.clientIDs, ['b']);
    // Another epoch's version means nothing here: the whole document, and how far it holds
    // the asking client's batches.
    const whole = room.sync({ version: 1, epoch: 'another' }, 'a');
    assert.ok(whole.ok && 'doc' in whole);
    assert.equal(whole.version, 2);
    assert.equal(whole.acceptedThrough, 1);
  });

  it('writes a snapshot of the published version, with the ledger', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'snap');
    await send(room, sent, 'a', 'x');
    assert.equal(room.needsSnapshot, true);
    assert.equal(await room.snapshot(), true);
    assert.equal(room.needsSnapshot, false);
    assert.equal(room.snapshotVersion, 1);
    const stored = await store.load('snap');
    assert.equal(stored?.snapshot?.version, 1);
    assert.deepEqual(stored?.snapshot?.clients, { a: 1 });
    assert.equal(room.settled, true);
  });

  it('does not answer from its copy once its lease may have lapsed, and asks for a renewal', () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'leased');
    assert.equal(room.leaseFresh(), true, 'no lease: nothing to confirm');
    const lease = { token: 'node/1#1', fence: 1 };
    room.holdLease(lease, performance.now(), 60_000);
    assert.equal(room.lease, lease);
    assert.equal(room.leaseFresh(), true);
    assert.equal(room.sync({}).ok, true);
    // A renewal sent a lease time ago (a pause): the copy may be older than the store's.
    room.leaseRenewed(performance.now() - 60_000, 60_000);
    assert.equal(room.leaseFresh(), false);
    const refused = room.sync({});
    assert.deepEqual(
      { ok: refused.ok, code: !refused.ok && refused.code },
      { ok: false, code: 'unavailable' },
    );
    assert.equal(!refused.ok && refused.retryAfterMs, leaseRetryMs);
    assert.equal(sent.stale, 1, 'the registry is asked to renew');
    assert.equal(room.releaseLease(), lease);
    assert.equal(room.lease, null);
    assert.equal(room.leaseFresh(), true);
  });

  it('refuses what is pending when closed, and settles whoever waits', async () => {
    const store = new MemoryStore();
    const { room, sent } = roomOn(store, 'closing');
    const answered = send(room, sent, 'a', 'x');
    const idle = room.whenIdle();
    room.close();
    const answer = await answered;
    assert.equal(!answer.ok && answer.code, 'unavailable');
    await idle;
    assert.equal(room.state, 'closed');
    assert.equal(await store.load('closing'), null, 'nothing was journaled');
  });
});
