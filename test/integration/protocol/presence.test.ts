import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Socket } from 'socket.io-client';
import type { PresenceBroadcast, PresenceUpdate, SyncAnswer } from '../../../schema/events.js';
import { roomOf } from '../../../server/protocol/socket.js';
import { startServer, type TestServer } from '../../support/server.js';
import { rawSocket } from '../../support/socket.js';
import { waitFor } from '../../support/wait.js';

/// A raw socket that records every presence event it receives.
interface Peer {
  socket: Socket;
  presences: PresenceBroadcast[];
  leaves: string[];
  errors: { code: string; message: string; event: string }[];
}

async function peer(url: string, docId: string, clientID: string, join = true): Promise<Peer> {
  const socket = rawSocket(url, docId, clientID);
  const result: Peer = { socket, presences: [], leaves: [], errors: [] };
  socket.on('presence', (presence: PresenceBroadcast) => result.presences.push(presence));
  socket.on('presence-leave', (leave: { clientID: string }) => result.leaves.push(leave.clientID));
  socket.on('protocol-error', (error: Peer['errors'][0]) => result.errors.push(error));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('connect_error', reject);
  });
  if (join) {
    const answer = await new Promise<SyncAnswer>((resolve) => socket.emit('join', {}, resolve));
    assert.equal(answer.ok, true);
  }
  return result;
}

function update(head: number, name = 'Ada'): PresenceUpdate {
  return { version: 0, anchor: head, head, name, color: '#aa3300' };
}

describe('presence', () => {
  let server: TestServer;
  const peers: Peer[] = [];
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    for (const p of peers) p.socket.close();
    await server.close();
  });

  async function open(docId: string, clientID: string, join = true): Promise<Peer> {
    const p = await peer(server.url, docId, clientID, join);
    peers.push(p);
    return p;
  }

  it('relays to the rest of the room with the client id, not to the sender or other rooms', async () => {
    const a = await open('presence-relay', 'a');
    const b = await open('presence-relay', 'b');
    const elsewhere = await open('presence-elsewhere', 'c');
    a.socket.emit('presence', update(1));
    await waitFor(() => b.presences.length === 1, 'b to receive the presence');
    assert.deepEqual(b.presences[0], { clientID: 'a', ...update(1) });
    // A round trip through the server orders after the relay.
    await new Promise((resolve) => a.socket.emit('pull', {}, resolve));
    assert.equal(a.presences.length, 0, 'the sender does not get its own presence');
    assert.equal(elsewhere.presences.length, 0);
  });

  it('throttles per socket but always delivers the latest update', async () => {
    const a = await open('presence-throttle', 'a');
    const b = await open('presence-throttle', 'b');
    for (let head = 1; head <= 30; head++) a.socket.emit('presence', update(head));
    await waitFor(() => b.presences.at(-1)?.head === 30, 'the latest presence to arrive');
    assert.ok(b.presences.length < 5, `extras are dropped (got ${b.presences.length})`);
  });

  it('tells a newcomer where the others are after its first presence', async () => {
    const a = await open('presence-newcomer', 'a');
    a.socket.emit('presence', update(3, 'First'));
    const b = await open('presence-newcomer', 'b');
    await new Promise((resolve) => b.socket.emit('pull', {}, resolve));
    assert.equal(b.presences.length, 0, 'nothing before it announces itself');
    b.socket.emit('presence', update(1, 'Second'));
    await waitFor(() => b.presences.length === 1, 'b to learn of a');
    assert.equal(b.presences[0]!.name, 'First');
    await waitFor(() => a.presences.length === 1, 'a to learn of b');
  });

  it('emits presence-leave when the last socket of a client leaves', async () => {
    const a = await open('presence-leave', 'a');
    const b = await open('presence-leave', 'b');
    a.socket.emit('presence', update(1));
    await waitFor(() => b.presences.length === 1, 'b to see a');
    // A second socket of the same client (a reconnect the server has not noticed yet): the
    // old one leaving must not remove the cursor.
    const again = await open('presence-leave', 'a');
    again.socket.emit('presence', update(2));
    await waitFor(() => b.presences.length === 2, 'b to see the new socket');
    a.socket.close();
    const room = () => server.server.io.sockets.adapter.rooms.get(roomOf('presence-leave'))?.size;
    await waitFor(() => room() === 2, 'the server to see the old socket go');
    // The leave would be emitted as the socket left the room; a round trip of b's orders after it.
    await new Promise((resolve) => b.socket.emit('pull', {}, resolve));
    assert.deepEqual(b.leaves, []);
    again.socket.close();
    await waitFor(() => b.leaves.length === 1, 'b to be told a left');
    assert.deepEqual(b.leaves, ['a']);
  });

  it('refuses malformed presence and presence before join with bad-request', async () => {
    const early = await open('presence-bad', 'early', false);
    early.socket.emit('presence', update(1));
    await waitFor(() => early.errors.length === 1, 'a protocol error');
    assert.equal(early.errors[0]!.code, 'bad-request');
    assert.equal(early.errors[0]!.event, 'presence');

    const a = await open('presence-bad', 'a');
    const b = await open('presence-bad', 'b');
    const bad: unknown[] = [
      null,
      'x',
      { ...update(1), head: -1 },
      { ...update(1), anchor: 1.5 },
      { ...update(1), version: '3' },
      { ...update(1), name: '' },
      { ...update(1), name: 'x'.repeat(65) },
      { ...update(1), color: 'red; background: url(x)' },
    ];
    for (const payload of bad) a.socket.emit('presence', payload);
    await waitFor(() => a.errors.length === bad.length, 'one protocol error each');
    assert.ok(a.errors.every((error) => error.code === 'bad-request'));
    assert.equal(b.presences.length, 0, 'nothing malformed is relayed');
  });
});
