import assert from 'node:assert/strict';
import { request } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { StepsAnswer, SyncAnswer } from '../../../schema/events.js';
import { renderNginxConfig } from '../../../deploy/nginx.js';
import { RedisStore } from '../../../server/stores/redis_store.js';
import { noAdmissionLimits } from '../../support/hostile.js';
import { startNginx } from '../../support/nginx.js';
import { freePort } from '../../support/redis_process.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { deleteRedisKeys, redisForTests } from '../../support/store_fixtures.js';

// The gateway (the real nginx, as `npm run cluster` renders it) in front of two nodes on one
// Redis: every spelling of a document's id that a node accepts reaches the node that serves
// the document, for sockets and `GET /docs/:id` alike, and a query the gateway would read
// otherwise than the node is refused by the node. Once, socket.io-client's `team%3Anotes` was
// hashed as it is and the path's `team:notes` decoded: reads of a document being edited went
// to the other node and were answered `503 moved`, and two clients spelling the query
// differently put one document's editors on two nodes.

const { redisUrl, keyPrefix } = redisForTests();
const nodeIds = ['node-a', 'node-b'];
const insert = {
  stepType: 'replace',
  from: 1,
  to: 1,
  slice: { content: [{ type: 'text', text: 'x' }] },
};

/// One HTTP request with `path` exactly as written (fetch would resolve dot segments).
function raw(
  port: number,
  method: string,
  path: string,
  body?: string,
): Promise<{ status: number; node: string | undefined; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          node: response.headers['x-scriptorium-node'] as string | undefined,
          text,
        }),
      );
    });
    req.on('error', reject);
    if (body !== undefined) req.setHeader('content-type', 'text/plain;charset=UTF-8');
    req.end(body);
  });
}

describe('the gateway routes every spelling of a document to one node', () => {
  let nodes: TestServer[];
  let dir: string;
  let port: number;
  let stopNginx: (() => Promise<void>) | null = null;

  before(async () => {
    const stores = nodeIds.map(() => new RedisStore({ url: redisUrl, keyPrefix }));
    await Promise.all(stores.map((store) => store.ready()));
    nodes = await Promise.all(
      nodeIds.map((nodeId, i) =>
        startServer({ ...noAdmissionLimits, nodeId, idleUnloadMs: 60_000 }, stores[i]),
      ),
    );
    dir = await mkdtemp(join(tmpdir(), 'scriptorium-nginx-'));
    port = await freePort();
    stopNginx = await startNginx(
      dir,
      renderNginxConfig({
        nodes: nodes.map((node) => `127.0.0.1:${node.port}`),
        listen: `127.0.0.1:${port}`,
        prefix: dir,
        workers: 1,
      }),
      `http://127.0.0.1:${port}/healthz`,
    );
  });
  after(async () => {
    await stopNginx?.();
    await Promise.all(nodes.map((node) => node.close()));
    await rm(dir, { recursive: true, force: true });
    await deleteRedisKeys(redisUrl, keyPrefix);
  });

  /// The Engine.IO and Socket.IO handshakes by hand over long-polling through the gateway,
  /// with `path` and `query` as written. Resolves with the node whose engine holds the
  /// session and what the connect was answered: `connected` or the refusal's code.
  async function handshake(query: string, path = '/socket.io/'): Promise<string> {
    const base = `${path}?EIO=4&transport=polling&${query}`;
    const open = await raw(port, 'GET', base);
    assert.ok(open.text.startsWith('0'), `${query}: engine.io open packet: ${open.text}`);
    const sid = (JSON.parse(open.text.slice(1)) as { sid: string }).sid;
    // Engine.IO's sessions by id (protected in its types, and the one way to see which node
    // holds a session).
    const holder = nodes.findIndex(
      (node) =>
        (node.server.io.engine as unknown as { clients: Record<string, unknown> }).clients[sid] !==
        undefined,
    );
    const posted = await raw(port, 'POST', `${base}&sid=${sid}`, '40{"clientID":"speller"}');
    assert.equal(posted.text, 'ok', `${query}: the connect packet reached the session's node`);
    const reply = (await raw(port, 'GET', `${base}&sid=${sid}`)).text.split('\x1e')[0]!;
    await raw(port, 'POST', `${base}&sid=${sid}`, '1');
    if (reply.startsWith('40')) return `${nodeIds[holder]} connected`;
    assert.ok(reply.startsWith('44'), `${query}: a connect error packet: ${reply}`);
    const code = (JSON.parse(reply.slice(2)) as { data?: { code?: string } }).data?.code;
    return `${nodeIds[holder]} ${code}`;
  }

  it('sends the reads and the sockets of a document with ":" in its id where its editors are', async () => {
    // Several ids: with two nodes, each spelling hashed as it is would split about half.
    for (const id of ['team:notes', 'a:b', 'x:1', 'doc:42', 'p:q', 'one:two:three']) {
      const editor = rawSocket(`http://127.0.0.1:${port}`, id, `editor-${id}`);
      try {
        const joined = await ask<SyncAnswer>(editor, 'join', {});
        assert.equal(joined.ok, true, `${id}: ${JSON.stringify(joined)}`);
        const typed = await ask<StepsAnswer>(editor, 'steps', { version: 0, steps: [insert] });
        assert.equal(typed.ok, true, `${id}: ${JSON.stringify(typed)}`);
        const serving = nodes.findIndex((node) => node.server.rooms.peek(id) !== undefined);
        const expected = nodeIds[serving]!;

        const encoded = encodeURIComponent(id);
        const lower = encoded.replace(/%3A/g, '%3a');
        const reads: string[] = [];
        for (const path of [
          ...[`/docs/${id}`, `/docs/${encoded}`, `/docs/${lower}`, `/docs/${id}/`],
          ...[`/Docs/${id}`, `/DOCS/${encoded}/`],
        ]) {
          const read = await raw(port, 'GET', path);
          reads.push(`${path} ${read.status} ${read.node}`);
        }
        assert.deepEqual(
          reads,
          reads.map((line) => `${line.split(' ')[0]} 200 ${expected}`),
          `${id}: served by ${expected}`,
        );

        const sockets: string[] = [];
        for (const spelled of [id, encoded, lower]) {
          sockets.push(`${spelled} ${await handshake(`doc=${spelled}`)}`);
        }
        assert.deepEqual(
          sockets,
          sockets.map((line) => `${line.split(' ')[0]} ${expected} connected`),
          id,
        );
      } finally {
        editor.close();
      }
    }
  });

  it("sends a document's history routes to its node, where a restore can append steps", async () => {
    const id = 'history:routed';
    const editor = rawSocket(`http://127.0.0.1:${port}`, id, 'editor-history');
    try {
      assert.equal((await ask<SyncAnswer>(editor, 'join', {})).ok, true);
      assert.equal(
        (await ask<StepsAnswer>(editor, 'steps', { version: 0, steps: [insert] })).ok,
        true,
      );
      const expected = nodeIds[nodes.findIndex((node) => node.server.rooms.peek(id) !== undefined)];
      const answers: string[] = [];
      for (const [method, path, body] of [
        ['GET', `/docs/${id}/history`],
        ['GET', `/docs/${encodeURIComponent(id)}/versions/0`],
        ['GET', `/Docs/${id}/changes?from=0&to=1`],
        ['POST', `/docs/${id}/versions/1/name`, { name: 'typed' }],
        ['POST', `/docs/${id}/restore`, { version: 0 }],
      ] as const) {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, {
          method,
          ...(body
            ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }
            : {}),
        });
        answers.push(
          `${method} ${path} ${response.status} ${response.headers.get('x-scriptorium-node')}`,
        );
      }
      assert.deepEqual(
        answers,
        answers.map((line) => `${line.split(' ').slice(0, 2).join(' ')} 200 ${expected}`),
      );
    } finally {
      editor.close();
    }
  });

  it('has the node refuse a query or path the gateway reads otherwise than the node', async () => {
    const refused: string[] = [];
    for (const query of [
      // $arg_doc is the first `doc` in any letter case, Engine.IO's the last spelled `doc`.
      ...['DOC=zzz&doc=spelled', 'doc=spelled&Doc=zzz', 'd%6Fc=zzz&doc=spelled'],
      ...['Doc=spelled&doc=spelled', 'doc=spelled&doc=spelled'],
      // The gateway decodes only %3A: any other escape reads as another document there.
      ...['doc=sp%65lled', 'doc=sp%2Delled', 'doc=a%3A%62'],
    ]) {
      refused.push(`${query} ${(await handshake(query)).split(' ')[1]}`);
    }
    // Routed as `GET /docs/zzz` by the gateway, which resolves the dot segment, and taken by
    // Engine.IO, which matches the path as sent.
    refused.push(
      `dot path ${(await handshake('doc=spelled', '/socket.io/../docs/zzz')).split(' ')[1]}`,
    );
    assert.deepEqual(
      refused,
      refused.map((line) => `${line.slice(0, line.lastIndexOf(' '))} bad-document-id`),
    );
    // The spellings the gateway reads as the node does are served.
    assert.match(await handshake('doc=spelled'), / connected$/);
    assert.match(await handshake('x=doc%3Dzzz&doc=sp:el%3Aled'), / connected$/);
  });
});
