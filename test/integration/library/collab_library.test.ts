import assert from 'node:assert/strict';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Schema, type Node } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import { pino } from 'pino';
import { Server } from 'socket.io';
import { io as connect, Manager, type Socket } from 'socket.io-client';
import { schema as builtIn } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import {
  CodedError,
  createCollab,
  MemoryStore,
  RedisStore,
  type AcceptedEvent,
  type Authenticate,
  type Collab,
  type CollabOptions,
  ConfigError,
} from '../../../server/index.js';
import { roomsOf } from '../../../server/collab.js';
import { CollabClient } from '../../../client/index.js';
import { ask } from '../../support/socket.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';
import { delay, waitFor } from '../../support/wait.js';

// createCollab embedded in a host app of the test's own: its http server, its Socket.io
// server, its schema (the built-in one plus a `callout` block) and its authentication (tokens
// from a table). Real sockets, no mocks.

const schema = new Schema({
  nodes: builtIn.spec.nodes.addToEnd('callout', {
    content: 'paragraph+',
    group: 'block',
    attrs: { tone: { default: 'info', validate: 'string' } },
    toDOM: () => ['aside', 0],
  }),
  marks: builtIn.spec.marks,
});

/// The host's tokens: who each is, and what it may open.
const tokens: Record<
  string,
  { user: string; access: 'read' | 'write'; doc: string; exp?: number }
> = {
  alice: { user: 'alice', access: 'write', doc: '*' },
  bob: { user: 'bob', access: 'write', doc: '*' },
  reader: { user: 'rita', access: 'read', doc: '*' },
  scoped: { user: 'sam', access: 'write', doc: 'team-*' },
};

const authenticate: Authenticate = ({ auth, docId }) => {
  const entry = typeof auth['token'] === 'string' ? tokens[auth['token']] : undefined;
  if (!entry) throw new Error('no such token');
  if (entry.doc !== '*' && !docId.startsWith(entry.doc.slice(0, -1))) {
    throw Object.assign(new Error('not your document'), { code: 'forbidden' });
  }
  return entry.exp === undefined
    ? { user: entry.user, access: entry.access }
    : { user: entry.user, access: entry.access, expiresAt: entry.exp };
};

interface Host {
  collab: Collab;
  http: HttpServer;
  io: Server;
  url: string;
  accepted: AcceptedEvent[];
  loaded: string[];
  unloaded: string[];
  close(): Promise<void>;
}

async function startHost(namespace = '/'): Promise<Host> {
  const accepted: AcceptedEvent[] = [];
  const loaded: string[] = [];
  const unloaded: string[] = [];
  const collab = createCollab({
    schema,
    store: new MemoryStore(),
    authenticate,
    logger: pino({ level: process.env['TEST_LOG_LEVEL'] ?? 'silent' }),
    limits: { idleUnloadMs: 200, batchesPerSecond: 0, pullsPerSecond: 0 },
    onLoad: ({ docId }) => {
      if (docId === 'refused-by-host') {
        throw Object.assign(new Error('archived'), { code: 'forbidden' });
      }
      if (docId === 'broken-hook') throw new Error('the host hook has a bug');
      loaded.push(docId);
    },
    onAccepted: (event) => {
      accepted.push(event);
      if (event.docId === 'throwing-accept') throw new Error('the host hook has a bug');
    },
    onUnload: ({ docId }) => {
      unloaded.push(docId);
    },
  });
  const http = createServer((_request, response) => response.end('the host app'));
  const io = new Server(http, collab.socketOptions);
  // The host's own traffic on the same Socket.io server, in another namespace.
  io.of('/chat').on('connection', (socket) => socket.on('hello', (ack: () => void) => ack()));
  collab.attach(io, { namespace });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  return {
    collab,
    http,
    io,
    url,
    accepted,
    loaded,
    unloaded,
    async close() {
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
}

/// A bare socket of the wire protocol, with `token` (none when null); resolves when connected,
/// rejects with the `connect_error`'s data.
function open(
  host: Host,
  doc: string,
  clientID: string,
  token: string | null,
  namespace = '/',
): Promise<Socket> {
  const socket = connect(host.url + (namespace === '/' ? '' : namespace), {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc },
    auth: token === null ? { clientID } : { clientID, token },
  });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', (err: Error & { data?: { code?: string } }) => {
      socket.close();
      reject(Object.assign(new Error(err.message), { code: err.data?.code }));
    });
  });
}

async function refusal(promise: Promise<Socket>): Promise<string | undefined> {
  try {
    (await promise).close();
    return 'connected';
  } catch (err) {
    return (err as { code?: string }).code;
  }
}

/// Joins and returns the document (as a node of the host's schema) and version.
async function join(socket: Socket): Promise<{ doc: Node; version: number }> {
  const answer = await ask<SyncAnswer>(socket, 'join', {});
  assert.ok(answer.ok && 'doc' in answer, JSON.stringify(answer));
  return { doc: schema.nodeFromJSON(answer.doc), version: answer.version };
}

function typeAt(doc: Node, text: string): unknown[] {
  return new Transform(doc).insert(1, schema.text(text)).steps.map((step) => step.toJSON());
}

describe('createCollab in a host app', () => {
  let host: Host;
  before(async () => {
    host = await startHost();
  });
  after(async () => {
    await host.close();
  });

  it('refuses connections without a valid token (unauthorized) or out of scope (forbidden)', async () => {
    assert.equal(await refusal(open(host, 'doc-a', 'c-none', null)), 'unauthorized');
    assert.equal(await refusal(open(host, 'doc-a', 'c-bad', 'forged')), 'unauthorized');
    assert.equal(await refusal(open(host, 'doc-a', 'c-sam', 'scoped')), 'forbidden');
    assert.equal(await refusal(open(host, 'team-notes', 'c-sam', 'scoped')), 'connected');
    // The host's other namespace is not the protocol's: no token needed there.
    const chat = connect(`${host.url}/chat`, { transports: ['websocket'], forceNew: true });
    await new Promise<void>((resolve) => chat.emit('hello', () => resolve()));
    chat.close();
  });

  it('accepts steps with a node type of the host schema, broadcasts them, and calls onAccepted after each', async () => {
    const alice = await open(host, 'doc-b', 'c-alice', 'alice');
    const bob = await open(host, 'doc-b', 'c-bob', 'bob');
    try {
      const { doc, version } = await join(alice);
      await join(bob);
      const broadcasts: unknown[] = [];
      bob.on('steps', (message: unknown) => broadcasts.push(message));
      const callout = schema.node('callout', { tone: 'warning' }, [
        schema.node('paragraph', null, [schema.text('Careful')]),
      ]);
      const steps = JSON.parse(
        JSON.stringify(new Transform(doc).insert(0, callout).steps.map((step) => step.toJSON())),
      ) as unknown[];
      const answer = await ask<StepsAnswer>(alice, 'steps', { version, steps });
      assert.deepEqual(answer, { ok: true, version: version + 1 });
      await waitFor(() => broadcasts.length === 1, 'the broadcast');
      assert.deepEqual(broadcasts[0], { version: version + 1, steps, clientIDs: ['c-alice'] });
      // An attribute the host's validator refuses.
      const bad = new Transform(doc)
        .insert(0, callout)
        .steps.map((step) => step.toJSON() as { slice: { content: { attrs: unknown }[] } });
      bad[0]!.slice.content[0]!.attrs = { tone: 42 };
      const refused = await ask<StepsAnswer>(alice, 'steps', { version: version + 1, steps: bad });
      assert.equal(refused.ok, false);
      assert.equal(!refused.ok && refused.code, 'invalid-step');
      await waitFor(() => host.accepted.some((event) => event.docId === 'doc-b'), 'onAccepted');
      const seen = host.accepted.filter((event) => event.docId === 'doc-b');
      assert.deepEqual(JSON.parse(JSON.stringify(seen)), [
        { docId: 'doc-b', version: version + 1, steps, clientID: 'c-alice', user: 'alice' },
      ]);
      assert.ok(host.loaded.includes('doc-b'), 'onLoad saw the document');
    } finally {
      alice.close();
      bob.close();
    }
  });

  it('answers a read-only token`s steps forbidden and changes nothing', async () => {
    // A reader follows a document; it cannot make one.
    await host.collab.change('doc-c', (tr) => tr.insert(1, schema.text('existing')));
    const reader = await open(host, 'doc-c', 'c-rita', 'reader');
    try {
      const { doc, version } = await join(reader);
      const answer = await ask<StepsAnswer>(reader, 'steps', {
        version,
        steps: typeAt(doc, 'x'),
      });
      assert.equal(!answer.ok && answer.code, 'forbidden');
      assert.equal((await host.collab.document('doc-c'))!.version, version);
    } finally {
      reader.close();
    }
  });

  it('refuses the steps of a socket whose credentials expired (unauthorized); a fresh connection writes', async () => {
    // Long enough for the join and one batch on a loaded machine (300 ms was not, in CI).
    const exp = Date.now() + 1500;
    tokens['short'] = { user: 'sue', access: 'write', doc: '*', exp };
    const sue = await open(host, 'doc-d', 'c-sue', 'short');
    try {
      const { doc, version } = await join(sue);
      const before = await ask<StepsAnswer>(sue, 'steps', { version, steps: typeAt(doc, 'a') });
      assert.equal(before.ok, true);
      // The expiry sweep sends the socket away within 250 ms of the expiry; a batch sent
      // before that is refused. Either way it is `unauthorized`, and nothing is written.
      const closing = new Promise<{ code: string }>((resolve) => sue.once('closing', resolve));
      // Elapsed time is the behaviour here: past the token's expiry.
      await delay(Math.max(0, exp - Date.now()) + 20);
      const sentAway = closing.then((notice) => ({ ok: false as const, code: notice.code }));
      const after = await Promise.race([
        // Sent away with the batch unanswered, the ask fails as its socket disconnects, in the
        // same turn as `closing` when both arrive in one write: the notice is the answer.
        ask<StepsAnswer>(sue, 'steps', {
          version: version + 1,
          steps: typeAt(roomsOf(host.collab).peek('doc-d')!.publishedDoc, 'b'),
        }).catch(() => sentAway),
        sentAway,
      ]);
      assert.equal(!after.ok && after.code, 'unauthorized');
      assert.equal((await host.collab.document('doc-d'))!.version, version + 1);
    } finally {
      sue.close();
    }
    // The client refreshes its token and reconnects.
    tokens['short'] = { user: 'sue', access: 'write', doc: '*', exp: Date.now() + 60_000 };
    const again = await open(host, 'doc-d', 'c-sue', 'short');
    try {
      const { doc, version } = await join(again);
      const answer = await ask<StepsAnswer>(again, 'steps', { version, steps: typeAt(doc, 'b') });
      assert.equal(answer.ok, true);
    } finally {
      again.close();
    }
  });

  it('sends a socket whose credentials expired away without closing the host`s own namespaces on its connection', async () => {
    // socket.io-client multiplexes the namespaces of one server on one connection: closing it
    // for the protocol's socket would disconnect the host's chat too ("io server disconnect",
    // from which socket.io-client does not reconnect).
    // Long enough to connect on a loaded machine: refused at the handshake instead, the socket
    // would never get the `closing` this waits for.
    tokens['brief'] = { user: 'bea', access: 'write', doc: '*', exp: Date.now() + 1500 };
    const manager = new Manager(host.url, {
      transports: ['websocket'],
      reconnection: false,
      query: { doc: 'doc-mux' },
    });
    const collabSocket = manager.socket('/', { auth: { clientID: 'c-bea', token: 'brief' } });
    const chat = manager.socket('/chat');
    try {
      const closing = new Promise<{ code: string }>((resolve) =>
        collabSocket.once('closing', resolve),
      );
      collabSocket.connect();
      chat.connect();
      assert.equal((await closing).code, 'unauthorized');
      await waitFor(() => !collabSocket.connected, 'the collab socket to be sent away');
      // Nothing to wait for: the chat socket must stay connected a while after the collab
      // socket was sent away.
      await delay(100);
      assert.equal(chat.connected, true);
      await new Promise<void>((resolve, reject) =>
        chat.timeout(2000).emit('hello', (err: Error | null) => (err ? reject(err) : resolve())),
      );
    } finally {
      collabSocket.close();
      chat.close();
    }
  });

  it('a CollabClient with a token function reconnects with a fresh token when its own expires, keeping its unconfirmed edits', async () => {
    let issued = 0;
    const token = () => {
      // Each token lives 400 ms.
      const name = `rotating-${++issued}`;
      tokens[name] = { user: 'rotor', access: 'write', doc: '*', exp: Date.now() + 400 };
      return name;
    };
    const editor = new CollabClient({ url: host.url, docId: 'doc-rotating', schema, token });
    try {
      await editor.ready();
      const typeText = (text: string) => {
        const state = editor.state!;
        editor.dispatch(state.tr.insertText(text, state.doc.content.size - 1));
      };
      typeText('one ');
      await editor.settled();
      // Elapsed time is the behaviour here: the edit below is typed after the token expired.
      await delay(500);
      // Past the token's expiry the server sent the socket away (`closing unauthorized`); the
      // client reconnected with a fresh token from the function, and the edit goes through
      // (or, typed in a connection's last moments, is refused `unauthorized` and sent again).
      typeText('two ');
      await waitFor(() => editor.status === 'synced' && !editor.hasUnconfirmed, 'resent', 10_000);
      assert.ok(issued >= 2, `tokens issued: ${issued}`);
      assert.ok((editor.refusals['unauthorized'] ?? 0) <= 1);
      const served = await host.collab.document('doc-rotating');
      assert.equal(served!.doc.textContent, 'one two ');
      assert.ok(served!.doc.eq(editor.state!.doc));
    } finally {
      editor.close();
    }
  });

  it('binds a client id to its user: another user claiming it is refused, even after she left; the same user is let in', async () => {
    const alice = await open(host, 'doc-e', 'c-shared', 'alice');
    try {
      assert.equal(await refusal(open(host, 'doc-e', 'c-shared', 'bob')), 'forbidden');
      const aliceAgain = await open(host, 'doc-e', 'c-shared', 'alice');
      aliceAgain.close();
    } finally {
      alice.close();
    }
    // Still hers once her sockets are gone: she may come back with unconfirmed steps.
    // Nothing to wait for: the binding must outlast her sockets' disconnection for a while.
    await delay(100);
    assert.equal(await refusal(open(host, 'doc-e', 'c-shared', 'bob')), 'forbidden');
    const back = await open(host, 'doc-e', 'c-shared', 'alice');
    back.close();
  });

  it('binds client ids per document: an id taken on one document locks no one out of another', async () => {
    // Client ids are public (every broadcast carries them). Bob, who may write to a document
    // of his own, takes the id Alice's editor uses elsewhere: her editor must still get in.
    const bob = await open(host, 'doc-bob', 'c-alices', 'bob');
    try {
      const alice = await open(host, 'doc-alice', 'c-alices', 'alice');
      alice.close();
      // On one document, the binding holds as before.
      assert.equal(await refusal(open(host, 'doc-bob', 'c-alices', 'alice')), 'forbidden');
    } finally {
      bob.close();
    }
  });

  it('binds client ids across the namespaces it is attached to, as the documents are shared', async () => {
    host.collab.attach(host.io, { namespace: '/second' });
    const alice = await open(host, 'doc-ns', 'c-ns-shared', 'alice');
    try {
      // Bob in another namespace, on the same document: his steps would reach Alice's editor
      // under her id.
      assert.equal(
        await refusal(open(host, 'doc-ns', 'c-ns-shared', 'bob', '/second')),
        'forbidden',
      );
    } finally {
      alice.close();
    }
  });

  it('change() edits through the same path: durable, broadcast to editors, onAccepted', async () => {
    const alice = await open(host, 'doc-f', 'c-alice-f', 'alice');
    try {
      const { version } = await join(alice);
      const broadcasts: { version: number; clientIDs: string[] }[] = [];
      alice.on('steps', (message: { version: number; clientIDs: string[] }) =>
        broadcasts.push(message),
      );
      const changed = await host.collab.change(
        'doc-f',
        (tr) => {
          tr.insert(1, schema.text('From the server'));
        },
        { user: 'robot' },
      );
      assert.equal(changed, version + 1);
      await waitFor(() => broadcasts.length === 1, 'the broadcast');
      assert.deepEqual(broadcasts[0]!.clientIDs, ['server']);
      const read = await host.collab.document('doc-f');
      assert.equal(read!.version, version + 1);
      assert.equal(read!.doc.textContent, 'From the server');
      const event = host.accepted.find((e) => e.docId === 'doc-f');
      assert.deepEqual(
        { user: event?.user, clientID: event?.clientID, version: event?.version },
        { user: 'robot', clientID: 'server', version: version + 1 },
      );
      // Two concurrent changes both apply, in order, without rebasing.
      const [first, second] = await Promise.all([
        host.collab.change('doc-f', (tr) => void tr.insert(1, schema.text('1'))),
        host.collab.change('doc-f', (tr) => void tr.insert(1, schema.text('2'))),
      ]);
      assert.deepEqual([first, second], [version + 2, version + 3]);
      assert.equal((await host.collab.document('doc-f'))!.doc.textContent, '21From the server');
      // A change the limits refuse rejects with the code and changes nothing: the server's
      // own edits are held to the document limits like anyone's.
      await assert.rejects(
        host.collab.change('doc-f', (tr) => void tr.insert(1, schema.text('x'.repeat(300_000)))),
        (err: unknown) => err instanceof CodedError && err.code === 'too-large',
      );
      assert.equal((await host.collab.document('doc-f'))!.version, version + 3);
    } finally {
      alice.close();
    }
  });

  it('document() is null for a document the store does not have; change() creates it', async () => {
    assert.equal(await host.collab.document('never-made'), null);
    assert.equal(
      await host.collab.change('made-by-change', (tr) => void tr.insert(1, schema.text('x'))),
      1,
    );
    assert.equal((await host.collab.document('made-by-change'))!.doc.textContent, 'x');
  });

  it("answers with the code of the host's onLoad error, or internal; a throwing onAccepted changes nothing", async () => {
    for (const [doc, code] of [
      ['refused-by-host', 'forbidden'],
      ['broken-hook', 'internal'],
    ] as const) {
      const socket = await open(host, doc, `c-${doc}`, 'alice');
      try {
        const answer = await ask<SyncAnswer>(socket, 'join', {});
        assert.equal(!answer.ok && answer.code, code, doc);
      } finally {
        socket.close();
      }
    }
    const socket = await open(host, 'throwing-accept', 'c-throw', 'alice');
    try {
      const { doc, version } = await join(socket);
      for (let i = 0; i < 3; i++) {
        const current = i === 0 ? doc : roomsOf(host.collab).peek('throwing-accept')!.publishedDoc;
        const answer = await ask<StepsAnswer>(socket, 'steps', {
          version: version + i,
          steps: typeAt(current, String(i)),
        });
        assert.deepEqual(answer, { ok: true, version: version + i + 1 });
      }
    } finally {
      socket.close();
    }
  });

  it('calls onUnload when an idle document is dropped from memory', async () => {
    await host.collab.change('unloads', (tr) => void tr.insert(1, schema.text('x')));
    await waitFor(() => host.unloaded.includes('unloads'), 'onUnload');
    assert.equal(roomsOf(host.collab).peek('unloads'), undefined);
  });
});

describe('createCollab options', () => {
  it('refuses a document id outside the pattern with bad-document-id, quarantining nothing', async () => {
    // On Redis such an id cannot make keys (a `}` breaks the hash tag): the store's TypeError
    // used to be taken for damaged data, and the id quarantined, logged and counted as corrupt.
    const { redisUrl, keyPrefix } = redisForTests();
    const store = new RedisStore({ url: redisUrl, keyPrefix });
    await store.ready();
    const errors: string[] = [];
    const logger = pino(
      { level: 'error' },
      { write: (line: string) => void errors.push(JSON.parse(line).msg) },
    );
    const collab = createCollab({ store, authenticate: null, logger });
    try {
      for (const id of ['a}b', 'x'.repeat(300), '']) {
        await assert.rejects(collab.document(id), { code: 'bad-document-id' }, id);
        await assert.rejects(
          collab.change(id, (tr) => void tr.insert(1, builtIn.text('x'))),
          { code: 'bad-document-id' },
          id,
        );
      }
      assert.equal(collab.stats().quarantined, 0);
      assert.equal(collab.stats().corruptLoads, 0);
      assert.deepEqual(errors, []);
    } finally {
      await collab.close();
      await deleteRedisKeys(redisUrl, keyPrefix);
    }
  });

  it('serves the protocol in the namespace it is attached to, and close() sends editors away', async () => {
    const host = await startHost('/collab');
    let closed = false;
    try {
      // `/` is the host's, untouched: a connection there is not answered by the protocol.
      const root = await open(host, 'doc', 'c-root', null, '/');
      const unanswered = await new Promise<boolean>((resolve) =>
        root.timeout(300).emit('join', {}, (err: Error | null) => resolve(err !== null)),
      );
      root.close();
      assert.equal(unanswered, true);
      const socket = await open(host, 'doc', 'c-ns', 'alice', '/collab');
      const closing = new Promise<{ code: string }>((resolve) => socket.on('closing', resolve));
      await join(socket);
      await host.close();
      closed = true;
      assert.equal((await closing).code, 'shutting-down');
      socket.close();
    } finally {
      if (!closed) await host.close();
    }
  });

  it('stats() counts documents and editors; health() is ready until close(), then says why not', async () => {
    const host = await startHost('/collab');
    let closed = false;
    try {
      assert.deepEqual(host.collab.stats(), {
        documents: 0,
        editors: 0,
        quarantined: 0,
        corruptLoads: 0,
        roomFailures: 0,
      });
      assert.deepEqual(await host.collab.health(), {
        ready: true,
        reason: null,
        draining: false,
        leases: true,
        store: null,
      });
      const socket = await open(host, 'stats-doc', 'c-stats', 'alice', '/collab');
      await join(socket);
      assert.equal(host.collab.stats().documents, 1);
      assert.equal(host.collab.stats().editors, 1);
      const closing = host.close();
      closed = true;
      assert.deepEqual(await host.collab.health(), {
        ready: false,
        reason: 'shutting down',
        draining: true,
        leases: true,
        store: null,
      });
      await closing;
      socket.close();
    } finally {
      if (!closed) await host.close();
    }
  });

  it('refuses settings that are not limits, and invalid limits', () => {
    assert.throws(() => createCollab({ limits: { port: 1 } as never }), /not a limit/);
    assert.throws(
      () => createCollab({ limits: { maxDocBytes: 1 } }),
      /^ConfigError: maxDocBytes must be a whole number/,
    );
    // A host passing limits knows them by their field names, not the environment's.
    assert.throws(
      () => createCollab({ limits: { maxDocDepth: 100 } }),
      /^ConfigError: maxJsonDepth \(128\) must be at least 2 × maxDocDepth \+ 8/,
    );
  });

  it('refuses an option it does not know: a misspelt authenticate must not run the server open', () => {
    const misspelt = { authenticte: authenticate } as unknown as CollabOptions;
    assert.throws(
      () => createCollab(misspelt),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /Unknown option "authenticte"/);
        return true;
      },
    );
    assert.throws(() => createCollab({ limit: {} } as unknown as CollabOptions), ConfigError);
  });

  it('warns at attach when no authenticate hook was given, and not when it is null (open on purpose)', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const warnings = () => lines.filter((line) => /no authenticate hook: open mode/.test(line));
    const http = createServer();
    const io = new Server(http);
    try {
      const open = createCollab({ logger });
      open.attach(io, { namespace: '/open' });
      assert.equal(warnings().length, 1, lines.join(''));
      const onPurpose = createCollab({ logger, authenticate: null });
      onPurpose.attach(io, { namespace: '/on-purpose' });
      const guarded = createCollab({ logger, authenticate });
      guarded.attach(io, { namespace: '/guarded' });
      assert.equal(warnings().length, 1, lines.join(''));
      await Promise.all([open.close(), onPurpose.close(), guarded.close()]);
    } finally {
      io.close();
    }
  });
});
