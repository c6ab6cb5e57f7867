import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import type { Schema } from 'prosemirror-model';
import { Server } from 'socket.io';
import { createCollab, type Collab } from '../../../server/index.js';

// `client-sim --schema MODULE` against a host that embeds Scriptorium with that schema: the
// simulated editors make their edits in the host's schema, and every document converges.

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../../', import.meta.url));
const schemaModule = 'test/fixtures/sim-schema.mjs';

describe('client-sim --schema', () => {
  let collab: Collab;
  let http: HttpServer;
  let io: Server;
  let url: string;
  const docIds = new Set<string>();

  before(async () => {
    const { schema } = (await import(`${root}${schemaModule}`)) as { schema: Schema };
    // Open on purpose: the simulator sends no tokens.
    collab = createCollab({
      schema,
      authenticate: null,
      limits: { batchesPerSecond: 0, pullsPerSecond: 0 },
    });
    // The two routes the simulator reads: /healthz, and /docs/:id for the convergence check.
    http = createServer((request, response) => {
      const match = /^\/docs\/([^/?]+)/.exec(request.url ?? '');
      response.setHeader('content-type', 'application/json');
      if (request.url === '/healthz') return response.end(JSON.stringify({ ok: true }));
      if (!match) {
        response.statusCode = 404;
        return response.end('{}');
      }
      const docId = decodeURIComponent(match[1]!);
      docIds.add(docId);
      void collab.document(docId).then((read) => {
        if (!read) response.statusCode = 404;
        response.end(JSON.stringify(read && { version: read.version, doc: read.doc.toJSON() }));
      });
      return undefined;
    });
    io = new Server(http, collab.socketOptions);
    collab.attach(io);
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  });
  after(async () => {
    await collab.close();
    await new Promise<void>((resolve) => io.close(() => resolve()));
  });

  it('six editors on two documents of the host schema converge', async () => {
    const { stdout } = await run(
      process.execPath,
      [
        'dist/client-sim/main.js',
        ...['--url', url, '--editors', '6', '--docs', '2', '--duration', '3'],
        ...['--schema', schemaModule, '--seed', '5'],
      ],
      { cwd: root },
    );
    assert.match(stdout, /\| 6 \|/);
    assert.match(
      stdout,
      /yes \(6\)/,
      'four full editors and the replica of each document converged',
    );
    // The documents hold the host's node and mark types, and only those.
    let words = 0;
    for (const docId of docIds) {
      const read = await collab.document(docId);
      assert.ok(read, docId);
      read.doc.check();
      words += read.doc.textContent.split(/\s+/).filter(Boolean).length;
      const types = new Set<string>();
      read.doc.descendants((node) => {
        types.add(node.type.name);
        for (const mark of node.marks) types.add(mark.type.name);
      });
      for (const type of types) {
        assert.ok(
          ['paragraph', 'bulletList', 'listItem', 'text', 'bold', 'italic', 'code'].includes(type),
          type,
        );
      }
    }
    assert.ok(words > 20, `${words} words typed`);
  });
});
