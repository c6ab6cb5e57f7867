import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { schema } from '../../../schema/index.js';
import { signToken } from '../../../server/protocol/auth.js';
import { startServer, type TestServer } from '../../support/server.js';

// The history routes of the standalone server, over real HTTP against a real server: tokens
// and scopes as on `GET /docs/:id`, each route's answer, and every malformed request refused
// with a code before it changes anything.

const secret = 'a-history-test-secret-long-enough-0123456789';

function token(user: string, doc: string, access: 'read' | 'write'): Promise<string> {
  return signToken(secret, { user, doc, access, ttlSeconds: 600 });
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

/// One request to the server, JSON in and out; `body` a string is sent as it is.
async function call(
  server: TestServer,
  method: 'GET' | 'POST',
  path: string,
  options: { token?: string; body?: unknown; type?: string; origin?: string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (options.token) headers['authorization'] = `Bearer ${options.token}`;
  if (options.origin) headers['origin'] = options.origin;
  if (options.body !== undefined) headers['content-type'] = options.type ?? 'application/json';
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers,
    ...(options.body === undefined
      ? {}
      : { body: typeof options.body === 'string' ? options.body : JSON.stringify(options.body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/// Writes `text` at the end of `docId`'s first paragraph as `user`, one step per character
/// (as typing does); resolves with the new version.
async function type(server: TestServer, docId: string, user: string, text: string) {
  let version = 0;
  for (const char of text) {
    version = await server.server.collab.change(
      docId,
      (tr) => {
        const end = tr.doc.firstChild ? tr.doc.firstChild.nodeSize - 1 : 0;
        if (!tr.doc.firstChild) tr.insert(0, schema.node('paragraph'));
        tr.insert(Math.max(1, end), schema.text(char));
      },
      { user, clientID: `${user}-client` },
    );
  }
  return version;
}

async function text(server: TestServer, docId: string): Promise<string> {
  const found = await server.server.collab.document(docId);
  return found ? found.doc.textContent : '';
}

describe('history routes with tokens', () => {
  let server: TestServer;
  const docId = 'history-http';
  let ann: string;
  let annRead: string;
  let bob: string;
  let afterAnn: number;
  let head: number;

  before(async () => {
    server = await startServer({ authSecret: secret });
    ann = await token('ann', docId, 'write');
    annRead = await token('ann', docId, 'read');
    bob = await token('bob', docId, 'write');
    afterAnn = await type(server, docId, 'ann', 'Ann. ');
    head = await type(server, docId, 'bob', 'Bob.');
  });
  after(async () => {
    await server?.close();
  });

  it('refuses without a token (401), out of scope (403), and writes with read access (403)', async () => {
    const other = await token('ann', 'another-doc', 'write');
    const routes: [method: 'GET' | 'POST', path: string, body?: unknown][] = [
      ['GET', `/docs/${docId}/history`],
      ['GET', `/docs/${docId}/versions/1`],
      ['GET', `/docs/${docId}/changes?from=0&to=1`],
      ['POST', `/docs/${docId}/versions/1/name`, { name: 'x' }],
      ['POST', `/docs/${docId}/restore`, { version: 1 }],
      ['POST', `/docs/${docId}/revert`, { user: 'bob' }],
    ];
    for (const [method, path, body] of routes) {
      const none = await call(server, method, path, { body });
      assert.equal(none.status, 401, `${method} ${path}`);
      assert.equal(none.body['code'], 'unauthorized');
      const scoped = await call(server, method, path, { body, token: other });
      assert.equal(scoped.status, 403, `${method} ${path}`);
      assert.equal(scoped.body['code'], 'forbidden');
      const reader = await call(server, method, path, { body, token: annRead });
      assert.equal(reader.status, method === 'GET' ? 200 : 403, `${method} ${path}`);
    }
    assert.equal(await text(server, docId), 'Ann. Bob.');
  });

  it('reads the timeline, a version and the attributed changes between two', async () => {
    const history = await call(server, 'GET', `/docs/${docId}/history`, { token: annRead });
    assert.equal(history.status, 200);
    const entries = history.body['entries'] as { fromVersion: number; toVersion: number }[];
    assert.equal(entries[0]!.toVersion, head);
    assert.deepEqual((entries[0] as unknown as { users: string[] }).users, ['ann', 'bob']);

    const version = await call(server, 'GET', `/docs/${docId}/versions/${afterAnn}`, {
      token: annRead,
    });
    assert.equal(version.status, 200);
    assert.equal(version.body['version'], afterAnn);
    assert.equal(schema.nodeFromJSON(version.body['doc']).textContent, 'Ann. ');

    const changes = await call(
      server,
      'GET',
      `/docs/${docId}/changes?from=${afterAnn}&to=${head}`,
      {
        token: annRead,
      },
    );
    assert.equal(changes.status, 200);
    const list = changes.body['changes'] as { inserted: { length: number; user: string }[] }[];
    const inserted = list.flatMap((change) => change.inserted);
    assert.equal(
      inserted.reduce((sum, span) => sum + span.length, 0),
      'Bob.'.length,
    );
    assert.ok(inserted.every((span) => span.user === 'bob'));
  });

  it('names a version as the token’s user, restores one, and reverts one author', async () => {
    const named = await call(server, 'POST', `/docs/${docId}/versions/${afterAnn}/name`, {
      token: bob,
      body: { name: '  First draft ' },
    });
    assert.equal(named.status, 200);
    const history = await call(server, 'GET', `/docs/${docId}/history`, { token: ann });
    const names = history.body['named'] as { version: number; name: string; user: string }[];
    assert.deepEqual(
      names.map(({ version, name, user }) => ({ version, name, user })),
      [{ version: afterAnn, name: 'First draft', user: 'bob' }],
    );

    const restored = await call(server, 'POST', `/docs/${docId}/restore`, {
      token: ann,
      body: { version: afterAnn },
    });
    assert.equal(restored.status, 200);
    assert.ok((restored.body['version'] as number) > head);
    assert.equal(await text(server, docId), 'Ann. ');

    // Bob writes again, Ann too: reverting Bob's changes since the restore keeps Ann's.
    const from = restored.body['version'] as number;
    await type(server, docId, 'bob', 'Bob again.');
    await type(server, docId, 'ann', ' Ann again.');
    const reverted = await call(server, 'POST', `/docs/${docId}/revert`, {
      token: ann,
      body: { user: 'bob', fromVersion: from },
    });
    assert.equal(reverted.status, 200);
    assert.equal(reverted.body['reverted'], 'Bob again.'.length);
    assert.equal(reverted.body['skipped'], 0);
    assert.equal(await text(server, docId), 'Ann.  Ann again.');
  });

  it('refuses every malformed request with a code, and changes nothing', async () => {
    const found = await server.server.collab.document(docId);
    const version = found!.version;
    const named = (await call(server, 'GET', `/docs/${docId}/history`, { token: ann })).body[
      'named'
    ];
    const d = `/docs/${docId}`;
    const cases: [
      method: 'GET' | 'POST',
      path: string,
      body: unknown,
      code: string,
      status: number,
    ][] = [
      ['GET', `${d}/history?limit=0`, undefined, 'bad-request', 400],
      ['GET', `${d}/history?limit=1001`, undefined, 'bad-request', 400],
      ['GET', `${d}/history?limit=ten`, undefined, 'bad-request', 400],
      ['GET', `${d}/history?limit=1&limit=2`, undefined, 'bad-request', 400],
      ['GET', `${d}/history?before=-1`, undefined, 'bad-request', 400],
      ['GET', `${d}/history?gapMs=1.5`, undefined, 'bad-request', 400],
      ['GET', `${d}/versions/abc`, undefined, 'bad-request', 400],
      ['GET', `${d}/versions/-1`, undefined, 'bad-request', 400],
      ['GET', `${d}/versions/1e3`, undefined, 'bad-request', 400],
      ['GET', `${d}/versions/01`, undefined, 'bad-request', 400],
      ['GET', `${d}/versions/99999999999999999`, undefined, 'bad-request', 400],
      ['GET', `${d}/changes?from=1`, undefined, 'bad-request', 400],
      ['GET', `${d}/changes?to=1`, undefined, 'bad-request', 400],
      ['GET', `${d}/changes?from=3&to=1`, undefined, 'bad-request', 400],
      ['GET', '/docs/a%20b/history', undefined, 'bad-document-id', 400],
      ['POST', `${d}/versions/1/name`, undefined, 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, '{"name":', 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, '["name"]', 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, 'null', 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, { name: '' }, 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, { name: '   ' }, 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, { name: 42 }, 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, { name: 'x'.repeat(201) }, 'bad-request', 400],
      ['POST', `${d}/versions/1/name`, { name: 'x'.repeat(5000) }, 'too-large', 413],
      ['POST', `${d}/versions/x/name`, { name: 'x' }, 'bad-request', 400],
      ['POST', `${d}/restore`, {}, 'bad-request', 400],
      ['POST', `${d}/restore`, { version: '1' }, 'bad-request', 400],
      ['POST', `${d}/restore`, { version: -1 }, 'bad-request', 400],
      ['POST', `${d}/restore`, { version: 1.5 }, 'bad-request', 400],
      ['POST', `${d}/restore`, { version: 2 ** 53 }, 'bad-request', 400],
      ['POST', `${d}/revert`, {}, 'bad-request', 400],
      ['POST', `${d}/revert`, { user: '' }, 'bad-request', 400],
      ['POST', `${d}/revert`, { user: 7 }, 'bad-request', 400],
      ['POST', `${d}/revert`, { user: 'bob', fromVersion: 'a' }, 'bad-request', 400],
      ['POST', `${d}/revert`, { user: 'bob', fromVersion: 5, toVersion: 2 }, 'bad-request', 400],
    ];
    for (const [method, path, body, code, status] of cases) {
      const answer = await call(server, method, path, { token: ann, body });
      const what = `${method} ${path} ${JSON.stringify(body)}`.slice(0, 120);
      assert.equal(answer.status, status, what);
      assert.equal(answer.body['code'], code, what);
      assert.equal(typeof answer.body['message'], 'string', what);
    }
    const plain = await call(server, 'POST', `${d}/restore`, {
      token: ann,
      body: JSON.stringify({ version: 1 }),
      type: 'text/plain',
    });
    assert.equal(plain.status, 400);
    assert.equal(plain.body['code'], 'bad-request');

    assert.equal((await server.server.collab.document(docId))!.version, version);
    const after = await call(server, 'GET', `/docs/${docId}/history`, { token: ann });
    assert.deepEqual(after.body['named'], named);
  });

  it('answers 404 for an unknown document, 400 for a version past the head', async () => {
    const unknown = await token('ann', 'no-such-doc', 'write');
    const missing = await call(server, 'GET', '/docs/no-such-doc/history', { token: unknown });
    assert.equal(missing.status, 404);
    assert.equal(missing.body['code'], 'not-found');
    const restore = await call(server, 'POST', '/docs/no-such-doc/restore', {
      token: unknown,
      body: { version: 0 },
    });
    assert.equal(restore.status, 404);
    const future = await call(server, 'GET', `/docs/${docId}/versions/100000`, { token: ann });
    assert.equal(future.status, 400);
    assert.equal(future.body['code'], 'bad-request');
    assert.match(future.body['message'] as string, /from 0 to \d+/);
  });
});

describe('history routes in open mode', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
    await type(server, 'open-history', 'ann', 'Hi');
  });
  after(async () => {
    await server?.close();
  });

  it('reads and writes with no token, as nobody, but not from another origin', async () => {
    const d = '/docs/open-history';
    assert.equal((await call(server, 'GET', `${d}/history`)).status, 200);
    const named = await call(server, 'POST', `${d}/versions/1/name`, {
      body: { name: 'start' },
      origin: server.url,
    });
    assert.equal(named.status, 200);
    assert.equal(named.body['user'], null);
    const foreign = await call(server, 'POST', `${d}/restore`, {
      body: { version: 1 },
      origin: 'https://elsewhere.example',
    });
    assert.equal(foreign.status, 403);
    assert.equal(foreign.body['code'], 'forbidden');
    assert.equal(await text(server, 'open-history'), 'Hi');
  });
});

describe('history routes past retention', () => {
  let server: TestServer;
  before(async () => {
    // A snapshot every 5 steps archives the history it replaces in segments.
    server = await startServer({ authSecret: secret, snapshotEverySteps: 5 });
  });
  after(async () => {
    await server?.close();
  });

  it('answers 410 history-gone for a version whose segment retention removed', async () => {
    const docId = 'history-gone';
    const reader = await token('ann', docId, 'write');
    const head = await type(server, docId, 'ann', 'Twenty characters!!!');
    const archive = server.store.archive!;
    let bases: number[] = [];
    for (let tries = 0; tries < 200 && bases.length < 2; tries++) {
      bases = await archive.bases(docId);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(bases.length >= 2, `archived segments: ${bases.join(', ')}`);
    // What retention does to old steps, through the store's own interface: the oldest segment
    // goes, its versions with it.
    const { generation } = await archive.stats(docId);
    const windows = await archive.windows(docId);
    assert.ok(await archive.rewrite(docId, generation, { remove: [bases[0]!], add: [], windows }));

    const d = `/docs/${docId}`;
    for (const path of [`${d}/versions/1`, `${d}/changes?from=1&to=${head}`]) {
      const gone = await call(server, 'GET', path, { token: reader });
      assert.equal(gone.status, 410, path);
      assert.equal(gone.body['code'], 'history-gone', path);
    }
    const restore = await call(server, 'POST', `${d}/restore`, {
      token: reader,
      body: { version: 1 },
    });
    assert.equal(restore.status, 410);
    assert.equal(restore.body['code'], 'history-gone');
    const kept = await call(server, 'GET', `${d}/versions/${head}`, { token: reader });
    assert.equal(kept.status, 200);
    assert.equal(await text(server, docId), 'Twenty characters!!!');
  });
});

describe('history routes over long ranges', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({
      authSecret: secret,
      historyMaxDiffSteps: 6,
      historyMaxRevertSteps: 6,
    });
  });
  after(async () => {
    await server?.close();
  });

  it('refuses changes and reverts spanning more steps than the limits, 413 too-large', async () => {
    const docId = 'long-ranges';
    const writer = await token('ann', docId, 'write');
    await type(server, docId, 'bob', 'abcd');
    const head = await type(server, docId, 'ann', 'efgh');
    assert.equal(head, 8);
    const d = `/docs/${docId}`;
    const wide = await call(server, 'GET', `${d}/changes?from=0&to=8`, { token: writer });
    assert.equal(wide.status, 413);
    assert.equal(wide.body['code'], 'too-large');
    assert.match(String(wide.body['message']), /HISTORY_MAX_DIFF_STEPS/);
    const narrow = await call(server, 'GET', `${d}/changes?from=2&to=8`, { token: writer });
    assert.equal(narrow.status, 200);
    const early = await call(server, 'POST', `${d}/revert`, {
      token: writer,
      body: { user: 'bob', fromVersion: 0 },
    });
    assert.equal(early.status, 413);
    assert.equal(early.body['code'], 'too-large');
    assert.equal(await text(server, docId), 'abcdefgh', 'a refused revert changes nothing');
    const recent = await call(server, 'POST', `${d}/revert`, {
      token: writer,
      body: { user: 'bob', fromVersion: 2 },
    });
    assert.equal(recent.status, 200);
    assert.equal(recent.body['reverted'], 2);
    assert.equal(await text(server, docId), 'abefgh');
  });
});
