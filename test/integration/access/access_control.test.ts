import assert from 'node:assert/strict';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { get as httpGet } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import { io, type Socket } from 'socket.io-client';
import { schema } from '../../../schema/index.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { docIdRedactor } from '../../../server/app/access.js';
import { ConfigError, loadConfig } from '../../../server/config.js';
import { signToken } from '../../../server/protocol/auth.js';
import type { MetricsWindow } from '../../../metrics/index.js';
import { noAdmissionLimits } from '../../support/hostile.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';

// The standalone server's access control, with real tokens, sockets and HTTP: JWTs in the
// handshake and on `GET /docs/:id`, read and write access, expiry, client ids bound to users,
// browser origins, and the metrics token.

const secret = 'a-test-secret-that-is-long-enough-0123456789';
const metricsToken = 'metrics-token-0123456789';

function token(
  user: string,
  doc: string,
  access: 'read' | 'write',
  ttlSeconds = 3600,
): Promise<string> {
  return signToken(secret, { user, doc, access, ttlSeconds });
}

/// A socket with `auth` (and, optionally, an Origin header); resolves when connected, rejects
/// with the refusal's code.
function connect(
  server: TestServer,
  doc: string,
  auth: Record<string, unknown>,
  origin?: string,
  host?: string,
): Promise<Socket> {
  const socket = io(server.url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc },
    auth,
    extraHeaders: { ...(origin ? { origin } : {}), ...(host ? { host } : {}) },
  });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', (err: Error & { data?: { code?: string } }) => {
      socket.close();
      reject(Object.assign(new Error(err.message), { code: err.data?.code ?? err.message }));
    });
  });
}

/// `GET path` with a `Host` header of the test's choosing (fetch does not let one set it).
function getWithHost(
  server: TestServer,
  path: string,
  host: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpGet(
      { host: '127.0.0.1', port: server.port, path, headers: { ...headers, host } },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      },
    );
    request.on('error', reject);
  });
}

async function outcome(promise: Promise<Socket>): Promise<string> {
  try {
    (await promise).close();
    return 'connected';
  } catch (err) {
    return (err as { code: string }).code;
  }
}

async function typeOnce(socket: Socket): Promise<StepsAnswer> {
  const joined = await ask<SyncAnswer>(socket, 'join', {});
  assert.ok(joined.ok && 'doc' in joined, JSON.stringify(joined));
  const doc = schema.nodeFromJSON(joined.doc);
  const steps = new Transform(doc).insert(1, schema.text('x')).steps.map((s) => s.toJSON());
  return ask<StepsAnswer>(socket, 'steps', { version: joined.version, steps });
}

describe('access control (AUTH_SECRET, ALLOWED_ORIGINS, METRICS_TOKEN)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({
      ...noAdmissionLimits,
      authSecret: secret,
      metricsToken,
      allowedOrigins: ['https://app.example'],
    });
  });
  after(async () => {
    await server.close();
  });

  it('refuses handshakes without a valid token (unauthorized) or out of scope (forbidden)', async () => {
    assert.equal(await outcome(connect(server, 'notes', { clientID: 'c1' })), 'unauthorized');
    assert.equal(
      await outcome(connect(server, 'notes', { clientID: 'c1', token: 'not.a.jwt' })),
      'unauthorized',
    );
    const forged = await signToken('another-secret-that-is-long-enough-98765', {
      user: 'eve',
      doc: '*',
      access: 'write',
      ttlSeconds: 60,
    });
    assert.equal(
      await outcome(connect(server, 'notes', { clientID: 'c1', token: forged })),
      'unauthorized',
    );
    const expired = await token('ann', '*', 'write', -10);
    assert.equal(
      await outcome(connect(server, 'notes', { clientID: 'c1', token: expired })),
      'unauthorized',
    );
    const scoped = await token('ann', 'team-*', 'write');
    assert.equal(
      await outcome(connect(server, 'notes', { clientID: 'c1', token: scoped })),
      'forbidden',
    );
    assert.equal(
      await outcome(connect(server, 'team-notes', { clientID: 'c1', token: scoped })),
      'connected',
    );
  });

  it('answers a read token`s steps forbidden and takes a write token`s', async (t) => {
    const reader = await connect(server, 'shared', {
      clientID: 'r1',
      token: await token('rita', 'shared', 'read'),
    });
    const writer = await connect(server, 'shared', {
      clientID: 'w1',
      token: await token('will', 'shared', 'write'),
    });
    t.after(() => {
      reader.close();
      writer.close();
    });
    // The writer first: a reader cannot make the document.
    assert.equal((await typeOnce(writer)).ok, true);
    const refused = await typeOnce(reader);
    assert.equal(!refused.ok && refused.code, 'forbidden');
  });

  it('sends a connected socket away once its token expired (closing unauthorized)', async (t) => {
    // JWT expiry is in whole seconds.
    const short = await token('sue', 'expiring', 'write', 2);
    const socket = await connect(server, 'expiring', { clientID: 's1', token: short });
    t.after(() => socket.close());
    const closing = new Promise<{ code: string }>((resolve) => socket.once('closing', resolve));
    const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
    assert.equal((await typeOnce(socket)).ok, true);
    assert.equal((await closing).code, 'unauthorized');
    assert.equal(await gone, 'io server disconnect');
    // Coming back with the same token is refused too.
    assert.equal(
      await outcome(connect(server, 'expiring', { clientID: 's1', token: short })),
      'unauthorized',
    );
  });

  it('binds client ids to users: another user`s claim is refused, the same user is let in', async (t) => {
    const ann = await connect(server, 'bound', {
      clientID: 'editor-1',
      token: await token('ann', '*', 'write'),
    });
    t.after(() => ann.close());
    const bob = await token('bob', '*', 'write');
    assert.equal(
      await outcome(connect(server, 'bound', { clientID: 'editor-1', token: bob })),
      'forbidden',
    );
    const annAgain = await token('ann', '*', 'write');
    assert.equal(
      await outcome(connect(server, 'bound', { clientID: 'editor-1', token: annAgain })),
      'connected',
    );
  });

  it('counts sockets per client id of each user: others using an editor`s id do not fill its cap', async (t) => {
    // Client ids are public: a reader opening sockets under an editor's id must not lock the
    // editor out with too-many-connections.
    const capped = await startServer({
      ...noAdmissionLimits,
      authSecret: secret,
      maxSocketsPerClient: 2,
    });
    const sockets: Socket[] = [];
    t.after(async () => {
      for (const socket of sockets) socket.close();
      await capped.close();
    });
    const eve = await token('eve', '*', 'read');
    for (let i = 0; i < 2; i++) {
      sockets.push(await connect(capped, 'capped', { clientID: 'editor-7', token: eve }));
    }
    assert.equal(
      await outcome(connect(capped, 'capped', { clientID: 'editor-7', token: eve })),
      'too-many-connections',
    );
    const ann = await token('ann', 'capped', 'write');
    assert.equal(
      await outcome(connect(capped, 'capped', { clientID: 'editor-7', token: ann })),
      'connected',
    );
  });

  it('does not show a reader`s presence under a client id a writer took after it connected', async (t) => {
    // A reader binds no id, so it can connect first with one a writer then claims.
    const rita = await connect(server, 'carets', {
      clientID: 'will-1',
      token: await token('rita', '*', 'read'),
    });
    const will = await connect(server, 'carets', {
      clientID: 'will-1',
      token: await token('will', '*', 'write'),
    });
    const watcher = await connect(server, 'carets', {
      clientID: 'watcher-1',
      token: await token('wanda', '*', 'read'),
    });
    t.after(() => {
      for (const socket of [rita, will, watcher]) socket.close();
    });
    // The writer makes the document; a reader cannot.
    for (const socket of [will, rita, watcher]) {
      const joined = await ask<SyncAnswer>(socket, 'join', {});
      assert.ok(joined.ok, JSON.stringify(joined));
    }
    const seen: string[] = [];
    watcher.on('presence', (presence: { clientID: string; name: string }) =>
      seen.push(`${presence.clientID}:${presence.name}`),
    );
    const at = (name: string) => ({ version: 0, anchor: 1, head: 1, name, color: '#112233' });
    rita.emit('presence', at('Will (spoofed)'));
    will.emit('presence', at('Will'));
    watcher.emit('presence', at('Wanda'));
    // Nothing to wait for: the reader's presences must not arrive, so the watcher listens a while.
    await delay(300);
    // Will's caret, relayed and told to the watcher as a newcomer; never the reader's. The
    // name shown is the user's, not the one sent.
    assert.ok(seen.length > 0, 'the writer`s presence');
    assert.deepEqual(new Set(seen), new Set(['will-1:will']));
  });

  it('removes a writer`s caret when it leaves, though a reader shown earlier under its id stays', async (t) => {
    const maker = await connect(server, 'ghost', {
      clientID: 'maker-1',
      token: await token('mia', '*', 'write'),
    });
    const watcher = await connect(server, 'ghost', {
      clientID: 'watcher-2',
      token: await token('wanda', '*', 'read'),
    });
    // A reader binds no id: it shows itself under one nobody holds yet.
    const rita = await connect(server, 'ghost', {
      clientID: 'will-2',
      token: await token('rita', '*', 'read'),
    });
    t.after(() => {
      for (const socket of [maker, watcher, rita]) socket.close();
    });
    for (const socket of [maker, watcher, rita]) {
      const joined = await ask<SyncAnswer>(socket, 'join', {});
      assert.ok(joined.ok, JSON.stringify(joined));
    }
    const shown = new Map<string, string>();
    watcher.on('presence', (presence: { clientID: string; name: string }) =>
      shown.set(presence.clientID, presence.name),
    );
    watcher.on('presence-leave', ({ clientID }: { clientID: string }) => shown.delete(clientID));
    const at = (name: string) => ({ version: 0, anchor: 1, head: 1, name, color: '#112233' });
    rita.emit('presence', at('Rita'));
    await delay(150);
    assert.equal(shown.get('will-2'), 'rita', 'shown by its user name');
    // The writer who owns the id arrives, shows his caret, and leaves.
    const will = await connect(server, 'ghost', {
      clientID: 'will-2',
      token: await token('will', '*', 'write'),
    });
    assert.ok((await ask<SyncAnswer>(will, 'join', {})).ok);
    will.emit('presence', at('Will'));
    await delay(150);
    assert.equal(shown.get('will-2'), 'will');
    will.close();
    // Rita's presence is not shown under the writer's id any more, so nothing stands for
    // the caret on screen: it goes.
    await waitFor(() => !shown.has('will-2'), "the writer's caret removed");
  });

  it('GET /docs/:id needs a bearer token with read access: 401 without, 403 out of scope', async () => {
    const writer = await connect(server, 'readable', {
      clientID: 'w2',
      token: await token('will', '*', 'write'),
    });
    assert.equal((await typeOnce(writer)).ok, true);
    writer.close();
    const url = `${server.url}/docs/readable`;
    const none = await fetch(url);
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), 'Bearer');
    const refusal = (await none.json()) as { code: string; message: string };
    assert.equal(refusal.code, 'unauthorized');
    // Over HTTP the token goes in a header; auth.token is the socket handshake's field.
    assert.match(refusal.message, /Authorization: Bearer/);
    const bad = await fetch(url, { headers: { authorization: 'Bearer nope' } });
    assert.equal(bad.status, 401);
    const other = await fetch(url, {
      headers: { authorization: `Bearer ${await token('ann', 'other-*', 'read')}` },
    });
    assert.equal(other.status, 403);
    assert.equal(((await other.json()) as { code: string }).code, 'forbidden');
    const ok = await fetch(url, {
      headers: { authorization: `Bearer ${await token('ann', 'readable', 'read')}` },
    });
    assert.equal(ok.status, 200);
    assert.equal(((await ok.json()) as { version: number }).version, 1);
  });

  it('admits browser handshakes from its own origin and ALLOWED_ORIGINS only', async () => {
    const auth = async (clientID: string) => ({
      clientID,
      token: await token('ann', '*', 'write'),
    });
    assert.equal(
      await outcome(connect(server, 'o', await auth('o1'), 'https://evil.example')),
      'websocket error',
    );
    assert.equal(
      await outcome(connect(server, 'o', await auth('o2'), 'https://app.example')),
      'connected',
    );
    assert.equal(await outcome(connect(server, 'o', await auth('o3'), server.url)), 'connected');
    assert.equal(await outcome(connect(server, 'o', await auth('o4'))), 'connected');
  });

  it('/metrics and /metrics/windows need the metrics token; the dashboard page does not', async () => {
    for (const path of ['/metrics', '/metrics/windows']) {
      const none = await fetch(`${server.url}${path}`);
      assert.equal(none.status, 401, path);
      const wrong = await fetch(`${server.url}${path}`, {
        headers: { authorization: 'Bearer wrong-token-0123456789' },
      });
      assert.equal(wrong.status, 401, path);
      const ok = await fetch(`${server.url}${path}`, {
        headers: { authorization: `Bearer ${metricsToken}` },
      });
      assert.equal(ok.status, 200, path);
    }
    assert.equal((await fetch(`${server.url}/dashboard`)).status, 200);
  });

  it('/healthz leaves out the counts the metrics token hides', async (t) => {
    const socket = await connect(server, 'counted', {
      clientID: 'h1',
      token: await token('ann', 'counted', 'write'),
    });
    try {
      const health = await fetch(`${server.url}/healthz`);
      assert.equal(health.status, 200);
      assert.deepEqual(await health.json(), { ok: true, store: 'memory' });
    } finally {
      socket.close();
    }
    // Without a metrics token they are there, as before.
    const open = await startServer({ ...noAdmissionLimits, authSecret: secret });
    t.after(() => open.close());
    const health = (await (await fetch(`${open.url}/healthz`)).json()) as object;
    assert.deepEqual(Object.keys(health), ['ok', 'store', 'documents', 'sockets']);
  });
});

describe('document ids in metrics', () => {
  it('are replaced by labels that stay the same in one process and reveal nothing', () => {
    const redact = docIdRedactor();
    const window = {
      topDocuments: [
        { documentId: 'secret-plan', acceptedPerSec: 2 },
        { documentId: 'other', acceptedPerSec: 1 },
      ],
    } as unknown as MetricsWindow;
    const first = redact(window).topDocuments.map((d) => d.documentId);
    const again = redact(window).topDocuments.map((d) => d.documentId);
    assert.deepEqual(first, again);
    assert.notEqual(first[0], first[1]);
    for (const label of first) assert.match(label, /^doc-[0-9a-f]{12}$/);
    assert.ok(!JSON.stringify(first).includes('secret'));
    // Another process (another key) labels the same id differently: no dictionary attack.
    assert.notDeepEqual(docIdRedactor()(window).topDocuments[0]!.documentId, first[0]);
  });
});

describe('access control with a required audience and issuer (AUTH_AUDIENCE, AUTH_ISSUER)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({
      ...noAdmissionLimits,
      authSecret: secret,
      authAudience: 'scriptorium',
      authIssuer: 'https://id.example',
    });
  });
  after(async () => {
    await server.close();
  });

  it('refuses tokens for another application or from another issuer, and takes its own', async () => {
    const claims = { user: 'ann', doc: '*', access: 'write', ttlSeconds: 60 } as const;
    for (const [what, extra, expected] of [
      ['neither claim', {}, 'unauthorized'],
      ['another audience', { audience: 'wiki', issuer: 'https://id.example' }, 'unauthorized'],
      [
        'another issuer',
        { audience: 'scriptorium', issuer: 'https://evil.example' },
        'unauthorized',
      ],
      ['no issuer', { audience: 'scriptorium' }, 'unauthorized'],
      ['its own', { audience: 'scriptorium', issuer: 'https://id.example' }, 'connected'],
    ] as const) {
      const signed = await signToken(secret, { ...claims, ...extra });
      assert.equal(
        await outcome(connect(server, 'notes', { clientID: 'c1', token: signed })),
        expected,
        what,
      );
    }
  });
});

describe('an open server (no tokens) and DNS rebinding', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ ...noAdmissionLimits });
  });
  after(async () => {
    await server.close();
  });

  it('refuses pages under a host name another site could point at it, and serves the rest', async () => {
    const writer = await connect(server, 'open-doc', { clientID: 'w' });
    await typeOnce(writer);
    writer.close();
    // A page on attacker.example, which the attacker's DNS now resolves to this server's
    // address: its Host is attacker.example, and over plain http its same-origin requests (a
    // polling handshake, a fetch) carry neither Origin nor Sec-Fetch-Site.
    const rebound = `attacker.example:${server.port}`;
    for (const [what, origin] of [
      ['with its origin', `http://${rebound}`],
      ['with no origin', undefined],
    ] as const) {
      const page = await outcome(connect(server, 'open-doc', { clientID: 'r1' }, origin, rebound));
      assert.equal(page, 'websocket error', what);
    }
    const polling = await getWithHost(
      server,
      '/socket.io/?EIO=4&transport=polling&doc=open-doc',
      rebound,
    );
    assert.equal(polling.status, 403, polling.body);
    const read = await getWithHost(server, '/docs/open-doc', rebound);
    assert.equal(read.status, 403);
    assert.equal((JSON.parse(read.body) as { code: string }).code, 'forbidden');
    // Under a local name, pages and other clients are served.
    const local = `localhost:${server.port}`;
    assert.equal(
      await outcome(connect(server, 'open-doc', { clientID: 'r2' }, `http://${local}`, local)),
      'connected',
    );
    assert.equal(
      await outcome(connect(server, 'open-doc', { clientID: 'r3' }, undefined, local)),
      'connected',
    );
    const tool = await getWithHost(server, '/docs/open-doc', `127.0.0.1:${server.port}`);
    assert.equal(tool.status, 200, tool.body);
  });

  it('serves a name of its own listed in ALLOWED_ORIGINS', async (t) => {
    const named = await startServer({
      ...noAdmissionLimits,
      allowedOrigins: ['http://collab.internal:4000'],
    });
    t.after(() => named.close());
    const host = 'collab.internal:4000';
    const writer = await connect(named, 'named-doc', { clientID: 'w' }, undefined, host);
    writer.close();
    const read = await getWithHost(named, '/docs/named-doc', host);
    assert.notEqual(read.status, 403, read.body);
  });
});

describe('access configuration', () => {
  it('refuses to start open with NODE_ENV=production unless AUTH=off, and contradictions', () => {
    assert.throws(() => loadConfig({}, { NODE_ENV: 'production' }), ConfigError);
    assert.equal(loadConfig({}, { NODE_ENV: 'production', AUTH: 'off' }).auth, 'off');
    assert.equal(
      loadConfig({}, { NODE_ENV: 'production', AUTH_SECRET: secret }).authSecret,
      secret,
    );
    assert.throws(() => loadConfig({}, { AUTH: 'off', AUTH_SECRET: secret }), /contradicts/);
    assert.throws(() => loadConfig({}, { AUTH_SECRET: 'short' }), /32 characters/);
    // Required claims with no key to read tokens by would only look like a check.
    assert.throws(() => loadConfig({}, { AUTH_AUDIENCE: 'scriptorium' }), /AUTH_AUDIENCE/);
    assert.throws(() => loadConfig({}, { AUTH_ISSUER: 'https://id.example' }), /AUTH_ISSUER/);
    const claimed = loadConfig({}, { AUTH_SECRET: secret, AUTH_AUDIENCE: 'scriptorium' });
    assert.equal(claimed.authAudience, 'scriptorium');
    assert.equal(claimed.authIssuer, null);
    // A typo of production must not pass for not-production, which would allow open mode.
    for (const value of ['prod', 'Production', 'PRODUCTION', 'staging']) {
      assert.throws(() => loadConfig({}, { NODE_ENV: value }), /NODE_ENV must be/, value);
    }
    for (const value of ['development', 'test']) {
      assert.equal(loadConfig({}, { NODE_ENV: value }).nodeEnv, value);
    }
    // A key that says PEM but does not parse: refused here, not when the verifier is built.
    assert.throws(
      () =>
        loadConfig(
          {},
          { AUTH_PUBLIC_KEY: '-----BEGIN PUBLIC KEY-----xyz-----END PUBLIC KEY-----' },
        ),
      /AUTH_PUBLIC_KEY is not a readable PEM public key/,
    );
    const { publicKey } = generateKeyPairSync('ed25519');
    const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
    // Keys that parse but that the verifier (RS256, ES256, EdDSA) can never check a token with:
    // every token was then refused unauthorized.
    const pemOf = (key: KeyObject) => key.export({ type: 'spki', format: 'pem' }).toString();
    for (const [found, key] of [
      ['an EC key on secp384r1', generateKeyPairSync('ec', { namedCurve: 'P-384' }).publicKey],
      ['a key of type x25519', generateKeyPairSync('x25519').publicKey],
      [
        'a key of type dsa',
        generateKeyPairSync('dsa', { modulusLength: 1024, divisorLength: 160 }).publicKey,
      ],
      ['an RSA key of 1024 bits', generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey],
    ] as const) {
      assert.throws(
        () => loadConfig({}, { AUTH_PUBLIC_KEY: pemOf(key) }),
        new RegExp(`^ConfigError: AUTH_PUBLIC_KEY must be .* got ${found}`),
        found,
      );
    }
    for (const key of [
      generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey,
      generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey,
    ]) {
      assert.equal(loadConfig({}, { AUTH_PUBLIC_KEY: pemOf(key) }).authPublicKey, pemOf(key));
    }
    assert.equal(loadConfig({}, { AUTH_PUBLIC_KEY: pem.replace(/\n/g, '\\n') }).authPublicKey, pem);
    for (const host of ['localhost', '127.0.0.1', '::', 'node-1.internal']) {
      assert.equal(loadConfig({}, { HOST: host }).host, host);
    }
    assert.throws(() => loadConfig({}, { HOST: 'not a host' }), /HOST must be/);
    // Ranges and cross-checks name the environment variable, as the operator set it (they
    // named the config field: "port must be…", MAX_DOC_DEPTH=100 blamed maxJsonDepth).
    assert.throws(
      () => loadConfig({}, { PORT: '70000' }),
      /^ConfigError: PORT must be a whole number from 0 to 65535, got 70000$/,
    );
    assert.throws(
      () => loadConfig({}, { MAX_DOC_DEPTH: '100' }),
      /^ConfigError: MAX_JSON_DEPTH \(128\) must be at least 2 × MAX_DOC_DEPTH \+ 8 \(208\)/,
    );
    // The comment over these checks promised it: an attribute must fit in one message.
    assert.throws(
      () => loadConfig({}, { MAX_ATTRIBUTE_BYTES: '100000' }),
      /^ConfigError: MAX_ATTRIBUTE_BYTES \(100000\) must be at most MAX_MESSAGE_BYTES \(65536\)/,
    );
    // A lease renewal that may wait as long as the lease could keep editors past it.
    assert.throws(
      () => loadConfig({}, { REDIS_URL: 'redis://127.0.0.1:6379', LEASE_MS: '1000' }),
      /^ConfigError: STORE_TIMEOUT_MS \(2000\) must be less than LEASE_MS \(1000\) with REDIS_URL/,
    );
    assert.equal(loadConfig({}, { LEASE_MS: '1000' }).leaseMs, 1000, 'no leases without Redis');
    assert.throws(
      () => loadConfig({}, { MAX_DOC_BYTES: String(8 * 1024 * 1024) }),
      /^ConfigError: MAX_SOCKET_BUFFER_BYTES \(4194304\) must be at least MAX_DOC_BYTES/,
    );
    assert.throws(() => loadConfig({}, { ALLOWED_ORIGINS: 'https://a.example/path' }), ConfigError);
    assert.deepEqual(
      loadConfig({}, { ALLOWED_ORIGINS: 'https://a.example, http://b.example:8080' })
        .allowedOrigins,
      ['https://a.example', 'http://b.example:8080'],
    );
  });
});
