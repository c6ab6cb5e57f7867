import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { Server } from 'socket.io';
import { io as connect, type Socket } from 'socket.io-client';
import type { PresenceBroadcast, SyncAnswer } from '../../../schema/events.js';
import { createCollab, type Authenticate } from '../../../server/index.js';
import { ask } from '../../support/socket.js';

// A caret's name is the authenticated user's: a co-editor cannot show its caret as someone
// else's by naming it so.

const authenticate: Authenticate = ({ auth }) => ({
  user: String(auth['token']),
  access: 'write',
});

function open(url: string, clientID: string, token: string): Promise<Socket> {
  const socket = connect(url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc: 'names' },
    auth: { clientID, token },
  });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', reject);
  });
}

describe('presence names', () => {
  it('shows the authenticated user as the name, whatever the client sends', async () => {
    const collab = createCollab({ authenticate, logger: pino({ level: 'silent' }) });
    const http = createServer();
    const io = new Server(http, collab.socketOptions);
    collab.attach(io);
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    const alice = await open(url, 'alice-1', 'alice@example.com');
    const mallory = await open(url, 'mallory-1', 'mallory@example.com');
    try {
      assert.ok((await ask<SyncAnswer>(alice, 'join', {})).ok);
      assert.ok((await ask<SyncAnswer>(mallory, 'join', {})).ok);
      const seen = new Promise<PresenceBroadcast>((resolve) => alice.once('presence', resolve));
      mallory.emit('presence', { version: 0, anchor: 1, head: 1, name: 'Alice', color: '#aa0000' });
      const shown = await seen;
      assert.equal(shown.clientID, 'mallory-1');
      assert.equal(shown.name, 'mallory@example.com');
    } finally {
      alice.close();
      mallory.close();
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    }
  });
});
