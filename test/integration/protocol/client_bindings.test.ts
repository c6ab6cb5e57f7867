import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { EditorState } from 'prosemirror-state';
import { Server } from 'socket.io';
import { io as connect, type Socket } from 'socket.io-client';
import { emptyDoc } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import {
  createCollab,
  type Authenticate,
  type Collab,
  type CollabLimits,
} from '../../../server/index.js';
import { ClientOwners } from '../../../server/protocol/client_owners.js';
import { MemoryStore } from '../../../server/stores/memory_store.js';
import type { Store } from '../../../server/stores/store.js';
import { ask } from '../../support/socket.js';

// A client id is bound to the user who writes with it on a document. The bindings of users who
// are gone are bounded, and a bound reached forgets only the releasing user's own: a co-editor
// churning handshakes cannot push out another's binding and take its id. A binding lost all
// the same (a restart, a move to another node) gives the next claimant of the id a fresh start:
// nothing written under the id before is presented to it as its own.

/// Tokens are `<user>:<access>`.
const authenticate: Authenticate = ({ auth }) => {
  const [user, access] = String(auth['token'] ?? '').split(':');
  if (!user || (access !== 'read' && access !== 'write')) throw new Error('bad token');
  return { user, access };
};

interface Host {
  collab: Collab;
  url: string;
  close(): Promise<void>;
}

const hosts: Host[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.close();
  for (const host of hosts.splice(0)) await host.close();
});

async function startHost(limits: Partial<CollabLimits>, store: Store): Promise<Host> {
  const collab = createCollab({
    store,
    authenticate,
    logger: pino({ level: process.env['TEST_LOG_LEVEL'] ?? 'silent' }),
    limits: { batchesPerSecond: 0, pullsPerSecond: 0, ...limits },
  });
  const http = createServer();
  const io = new Server(http, collab.socketOptions);
  collab.attach(io);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const host: Host = {
    collab,
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    async close() {
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
  hosts.push(host);
  return host;
}

/// Connects `clientID` with `token`: the socket, or the refusal's code.
function attempt(
  host: Host,
  doc: string,
  clientID: string,
  token: string,
): Promise<Socket | string> {
  const socket = connect(host.url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc },
    auth: { clientID, token },
  });
  sockets.push(socket);
  return new Promise((resolve) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', (err: Error & { data?: { code: string } }) => {
      socket.close();
      resolve(err.data?.code ?? err.message);
    });
  });
}

async function connected(
  host: Host,
  doc: string,
  clientID: string,
  token: string,
): Promise<Socket> {
  const socket = await attempt(host, doc, clientID, token);
  assert.ok(typeof socket !== 'string', `refused: ${String(socket)}`);
  return socket;
}

function typed(doc = emptyDoc(), text = 'a'): object {
  return EditorState.create({ doc }).tr.insertText(text, 1).steps[0]!.toJSON() as object;
}

describe('client-id bindings', () => {
  it('keep one user from pushing out another user’s binding, whatever the churn', () => {
    const hour = 60 * 60 * 1000;
    const owners = new ClientOwners({ maxHeld: 20, maxHeldPerUser: 5, maxHeldPerDocument: 10 });
    owners.claim('doc', 'alice-1', 'alice');
    owners.release('doc', 'alice-1', 0);
    // Mallory's churn: a new client id per handshake, far past every bound.
    for (let i = 0; i < 200; i++) {
      owners.claim('doc', `m-${i}`, 'mallory');
      owners.release('doc', `m-${i}`, i);
    }
    assert.equal(owners.mayUse('doc', 'alice-1', 'mallory', hour), false, 'still Alice’s');
    assert.equal(owners.mayUse('doc', 'alice-1', 'alice', hour), true);
    // Mallory's own newest are kept (her reconnects still work), her oldest forgotten.
    assert.equal(owners.mayUse('doc', 'm-199', 'bob', hour), false);
    assert.equal(owners.mayUse('doc', 'm-0', 'bob', hour), true);
    assert.ok(owners.size <= 1 + 5);
  });

  it('bound the bindings on one document, forgetting only the releasing user’s', () => {
    const owners = new ClientOwners({ maxHeld: 100, maxHeldPerUser: 100, maxHeldPerDocument: 4 });
    for (const user of ['a', 'b', 'c']) {
      owners.claim('doc', `${user}-1`, user);
      owners.release('doc', `${user}-1`, 0);
    }
    for (let i = 0; i < 50; i++) {
      owners.claim('doc', `m-${i}`, 'mallory');
      owners.release('doc', `m-${i}`, i);
    }
    for (const user of ['a', 'b', 'c']) {
      assert.equal(owners.mayUse('doc', `${user}-1`, 'mallory', 100), false, user);
    }
    assert.equal(owners.size, 4);
  });

  it('forget a binding after its hold', () => {
    const owners = new ClientOwners({ holdMs: 1_000 });
    owners.claim('doc', 'alice-1', 'alice');
    assert.equal(owners.claim('doc', 'alice-1', 'alice'), false, 'a second socket');
    owners.release('doc', 'alice-1', 0);
    owners.release('doc', 'alice-1', 0);
    assert.equal(owners.mayUse('doc', 'alice-1', 'bob', 999), false);
    assert.equal(owners.mayUse('doc', 'alice-1', 'bob', 1_000), true);
    assert.equal(owners.claim('doc', 'alice-1', 'bob'), true, 'a claim that found no binding');
  });

  it('rate-limits one user’s handshakes, with a retry hint', async () => {
    const host = await startHost({ handshakesPerMinute: 10 }, new MemoryStore());
    const outcomes: (Socket | string)[] = [];
    for (let i = 0; i < 14; i++) {
      const result = await attempt(host, 'churn', `m-${i}`, 'mallory:write');
      outcomes.push(result);
      if (typeof result !== 'string') result.close();
    }
    assert.ok(outcomes.slice(0, 10).every((outcome) => typeof outcome !== 'string'));
    assert.deepEqual(outcomes.slice(10), Array(4).fill('rate-limited'));
  });

  it('keeps an owner’s binding through a co-editor’s handshake churn', async () => {
    const host = await startHost({ handshakesPerMinute: 0 }, new MemoryStore());
    const alice = await connected(host, 'shared', 'alice-1', 'alice:write');
    assert.ok((await ask<SyncAnswer>(alice, 'join', {})).ok);
    alice.close();
    // Every handshake of Mallory's binds a new id and releases it.
    for (let i = 0; i < 60; i++) {
      const socket = await connected(host, 'shared', `m-${i}`, 'mallory:write');
      socket.close();
    }
    assert.equal(await attempt(host, 'shared', 'alice-1', 'mallory:write'), 'forbidden');
    const back = await connected(host, 'shared', 'alice-1', 'alice:write');
    assert.ok((await ask<SyncAnswer>(back, 'join', {})).ok);
  });

  it('shows nothing written under an id to a claimant that found no binding for it', async () => {
    const store = new MemoryStore();
    const first = await startHost({}, store);
    const alice = await connected(first, 'lost', 'shared-id', 'alice:write');
    assert.ok((await ask<SyncAnswer>(alice, 'join', {})).ok);
    let doc = emptyDoc();
    let version = 0;
    for (const text of ['a', 'b', 'c']) {
      const answer = await ask<StepsAnswer>(alice, 'steps', { version, steps: [typed(doc, text)] });
      assert.ok(answer.ok);
      version = answer.version;
      doc = EditorState.create({ doc }).tr.insertText(text, 1).doc;
    }
    alice.close();
    // Another process on the same store: the binding is not there (a restart, a move).
    const second = await startHost({}, store);
    const mallory = await connected(second, 'lost', 'shared-id', 'mallory:write');
    const bySteps = await ask<SyncAnswer>(mallory, 'join', { version: 0 });
    assert.ok(bySteps.ok);
    assert.equal(bySteps.version, 3);
    assert.ok(!('steps' in bySteps), 'steps under the id would be taken for its own');
    assert.ok(!('acceptedThrough' in bySteps));
    // Once it has been answered, what it writes is its own as usual.
    const answer = await ask<StepsAnswer>(mallory, 'steps', {
      version: 3,
      steps: [typed(doc, 'm')],
    });
    assert.ok(answer.ok);
    const pulled = await ask<SyncAnswer>(mallory, 'pull', { version: 3 });
    assert.ok(pulled.ok && 'steps' in pulled);
    assert.deepEqual(pulled.clientIDs, ['shared-id']);
    mallory.close();
    const third = await startHost({}, store);
    const again = await connected(third, 'lost', 'shared-id', 'mallory:write');
    const wholeDoc = await ask<SyncAnswer>(again, 'join', {});
    assert.ok(wholeDoc.ok && 'doc' in wholeDoc);
    assert.ok(!('acceptedThrough' in wholeDoc), 'acceptedThrough of a batch it did not send');
  });
});
