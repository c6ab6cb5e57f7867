import assert from 'node:assert/strict';
import { get } from 'node:http';
import { describe, it } from 'node:test';
import type { Socket } from 'socket.io-client';
import { connectionsPerAddress } from '../../../server/protocol/engine_guard.js';
import { startServer, type TestServer } from '../../support/server.js';
import { rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

// Engine.IO connections are counted from their first request, whether or not they ever
// connect the protocol's namespace: a client looping polling handshakes without a token must
// not hold more than its address's share of the process, nor hold it for long.

/// Opens an Engine.IO session by a polling handshake (no Socket.io CONNECT follows): resolves
/// with the HTTP status and, when it opened one, the session id.
function pollingHandshake(url: string): Promise<{ status: number; sid?: string }> {
  return new Promise((resolve, reject) => {
    get(`${url}/socket.io/?EIO=4&transport=polling`, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        const sid = /"sid":"([^"]+)"/.exec(body)?.[1];
        resolve(sid ? { status: res.statusCode!, sid } : { status: res.statusCode! });
      });
    }).on('error', reject);
  });
}

/// Polls session `sid` once: 200 while it is open, 400 once the server forgot it.
function poll(url: string, sid: string): Promise<number> {
  return new Promise((resolve, reject) => {
    get(`${url}/socket.io/?EIO=4&transport=polling&sid=${sid}`, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    }).on('error', reject);
  });
}

function outcome(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    socket.once('connect', () => resolve('connected'));
    socket.once('connect_error', (err) =>
      resolve((err as Error & { data?: { code: string } }).data?.code ?? err.message),
    );
  });
}

async function withServer(
  overrides: Parameters<typeof startServer>[0],
  body: (server: TestServer) => Promise<void>,
): Promise<void> {
  const server = await startServer(overrides);
  try {
    await body(server);
  } finally {
    await server.close();
  }
}

describe('Engine.IO sessions', () => {
  it('counts sessions that never connect a namespace against the per-address cap', async () => {
    await withServer({ maxConnectionsPerIp: 5 }, async (server) => {
      // Five, and as many again for handshakes being refused with a code.
      const held = connectionsPerAddress(5);
      assert.equal(held, 10);
      const statuses: number[] = [];
      for (let i = 0; i < 30; i++) statuses.push((await pollingHandshake(server.url)).status);
      assert.deepEqual(statuses.slice(0, held), Array(held).fill(200));
      assert.deepEqual(statuses.slice(held), Array(30 - held).fill(403));
      assert.equal(server.server.io.engine.clientsCount, held);
      // The protocol's own sockets are refused too while the sessions hold the address's share.
      const socket = rawSocket(server.url, 'full', 'late');
      assert.notEqual(await outcome(socket), 'connected');
      socket.close();
    });
  });

  it('counts concurrent handshakes before their sessions exist', async () => {
    await withServer({ maxConnectionsPerIp: 4 }, async (server) => {
      const answers = await Promise.all(
        Array.from({ length: 40 }, () => pollingHandshake(server.url)),
      );
      const held = connectionsPerAddress(4);
      assert.equal(answers.filter((answer) => answer.status === 200).length, held);
      assert.equal(server.server.io.engine.clientsCount, held);
    });
  });

  it('bounds the sessions of every address together', async () => {
    await withServer({ maxConnectionsPerIp: 0, maxConnections: 3 }, async (server) => {
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await pollingHandshake(server.url)).status);
      assert.deepEqual(statuses, [200, 200, 200, 403, 403, 403]);
    });
  });

  it('closes a session that connects no namespace within the handshake timeout, freeing its place', async () => {
    await withServer({ maxConnectionsPerIp: 1, handshakeTimeoutMs: 300 }, async (server) => {
      const first = await pollingHandshake(server.url);
      assert.equal(first.status, 200);
      assert.equal((await pollingHandshake(server.url)).status, 200, 'the headroom');
      assert.equal((await pollingHandshake(server.url)).status, 403, 'the address is full');
      const engine = server.server.io.engine as unknown as {
        clientsCount: number;
        clients: Record<string, { readyState: string; transport: { name: string } }>;
      };
      await waitFor(() => engine.clientsCount === 0, 'the session to close').catch((error) => {
        const left = Object.entries(engine.clients).map(
          ([sid, conn]) => `${sid}: ${conn.readyState} (${conn.transport.name})`,
        );
        throw new Error(`${(error as Error).message}; still open: ${left.join(', ')}`);
      });
      assert.equal(await poll(server.url, first.sid!), 400, 'the session is gone');
      const again = await pollingHandshake(server.url);
      assert.equal(again.status, 200, 'its place is free again');
    });
  });

  it('keeps a session that connected the namespace past the handshake timeout', async () => {
    await withServer({ handshakeTimeoutMs: 200 }, async (server) => {
      const socket = rawSocket(server.url, 'kept', 'kept-1');
      try {
        assert.equal(await outcome(socket), 'connected');
        await delay(600);
        assert.ok(socket.connected);
        assert.equal(server.server.io.engine.clientsCount, 1);
      } finally {
        socket.close();
      }
    });
  });

  it('gives the place back when a session closes', async () => {
    await withServer({ maxConnectionsPerIp: 1 }, async (server) => {
      const socket = rawSocket(server.url, 'back', 'back-1');
      assert.equal(await outcome(socket), 'connected');
      assert.equal((await pollingHandshake(server.url)).status, 200, 'the headroom');
      assert.equal((await pollingHandshake(server.url)).status, 403);
      socket.close();
      await waitFor(() => server.server.io.engine.clientsCount === 1, 'the socket to close');
      assert.equal((await pollingHandshake(server.url)).status, 200);
    });
  });
});
