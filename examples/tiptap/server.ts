import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Server } from 'socket.io';
// In your app: `import { createCollab, FileStore } from 'scriptorium'`. The example imports
// the repository's build by path so that it runs from a fresh clone after `npm run build`.
import { createCollab, MemoryStore, type Collab } from '../../server/index.js';
// In your app: `from 'scriptorium/schema'`.
import { docIdPattern, errorBody } from '../../schema/index.js';
import { schema } from './extensions.js';

/// The host app of the example: its own http server (the page, its script, and a read-only
/// `GET /docs/:id` for the tests) and its own Socket.io server, on which `createCollab` serves
/// documents of Tiptap's schema.
export async function startExample(
  port = 0,
  host = '127.0.0.1',
): Promise<{ url: string; collab: Collab; close(): Promise<void> }> {
  const publicDir = fileURLToPath(new URL('./public/', import.meta.url));
  // Open on purpose (anyone who reaches it may edit): an example, listening on loopback. Your
  // app passes an `authenticate` that checks its own sessions.
  const collab = createCollab({ schema, store: new MemoryStore(), authenticate: null });
  const http = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://host').pathname;
    const docMatch = /^\/docs\/([^/]+)$/.exec(path);
    if (docMatch) {
      // A malformed escape (`%E0%A4%A`) makes decodeURIComponent throw, which in this handler
      // would end the process. An id that decodes but is not one (a space, a `}`, too long)
      // makes the store throw, which is no failure of the server: both are answered as the
      // standalone server answers them.
      let docId: string | null;
      try {
        docId = decodeURIComponent(docMatch[1]!);
      } catch {
        docId = null;
      }
      if (docId === null || !docIdPattern.test(docId)) {
        response.statusCode = 400;
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify(errorBody('bad-document-id')));
        return;
      }
      void collab.document(docId).then(
        (read) => {
          response.setHeader('content-type', 'application/json');
          if (!read) response.statusCode = 404;
          response.end(JSON.stringify(read && { version: read.version, doc: read.doc.toJSON() }));
        },
        () => {
          response.statusCode = 500;
          response.end();
        },
      );
      return;
    }
    const file = path === '/' ? 'index.html' : path === '/page.js' ? 'page.js' : null;
    if (!file) {
      response.statusCode = 404;
      response.end('not found');
      return;
    }
    readFile(publicDir + file).then(
      (body) => {
        response.setHeader('content-type', file.endsWith('.js') ? 'text/javascript' : 'text/html');
        response.end(body);
      },
      () => {
        response.statusCode = 500;
        response.end('run npm run build first');
      },
    );
  });
  const io = new Server(http, collab.socketOptions);
  collab.attach(io);
  await new Promise<void>((resolve) => http.listen(port, host, resolve));
  const url = `http://${host}:${(http.address() as AddressInfo).port}`;
  return {
    url,
    collab,
    async close() {
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const port = Number(process.env['PORT'] ?? 4010);
  const example = await startExample(port, process.env['HOST'] ?? '127.0.0.1');
  console.log(`Tiptap example on ${example.url}/?doc=welcome: open it in two windows`);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => void example.close().then(() => process.exit(0)));
  }
}
