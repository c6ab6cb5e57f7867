import { readFile } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Server } from 'socket.io';
// In your app: `import { createCollab, FileStore } from 'scriptorium'`. The example imports
// the repository's build by path so that it runs from a fresh clone after `npm run build`.
import {
  CodedError,
  createCollab,
  MemoryStore,
  type Collab,
  type Store,
} from '../../server/index.js';
// In your app: `from 'scriptorium/protocol'`.
import { docIdPattern, errorBody, errors, type ErrorCode } from '../../schema/protocol.js';
import { schema } from './extensions.js';

/// The host app of the example: its own http server (the page, its script, and a read-only
/// `GET /docs/:id` for the tests) and its own Socket.io server, on which `createCollab` serves
/// documents of Tiptap's schema, kept in `store` (in memory by default).
export async function startExample(
  port = 0,
  host = '127.0.0.1',
  store: Store = new MemoryStore(),
): Promise<{ url: string; collab: Collab; close(): Promise<void> }> {
  const publicDir = fileURLToPath(new URL('./public/', import.meta.url));
  // Open on purpose (anyone who reaches it may edit): an example, listening on loopback. Your
  // app passes an `authenticate` that checks its own sessions.
  const collab = createCollab({ schema, store, authenticate: null });
  const http = createServer((request, response) => {
    // `new URL` throws on a request target such as `//[` (its host part does not parse), and a
    // throw in this handler would end the process: one request would take the example down.
    let path: string;
    try {
      path = new URL(request.url ?? '/', 'http://host').pathname;
    } catch {
      return answerError(response, 'bad-request', 'The request target is not a URL');
    }
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
        return answerError(response, 'bad-document-id');
      }
      void collab.document(docId).then(
        (read) => {
          if (!read) return answerError(response, 'not-found');
          response.setHeader('content-type', 'application/json');
          response.end(JSON.stringify({ version: read.version, doc: read.doc.toJSON() }));
        },
        (err: unknown) => {
          // `document()` rejects with a CodedError (`unavailable` when the store fails); the
          // table's message is sent, not the error's, which may name the store's internals.
          const coded = err instanceof CodedError ? err : null;
          answerError(response, coded?.code ?? 'internal', undefined, coded?.retryAfterMs);
        },
      );
      return;
    }
    const file = path === '/' ? 'index.html' : path === '/page.js' ? 'page.js' : null;
    if (!file) return answerError(response, 'not-found', `Nothing at ${path}`);
    readFile(publicDir + file).then(
      (body) => {
        response.setHeader('content-type', file.endsWith('.js') ? 'text/javascript' : 'text/html');
        response.end(body);
      },
      () => answerError(response, 'internal', 'The page is not built: run npm run build first'),
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

/// Answers with the coded body the standalone server sends (`{code, message, retryable}`):
/// 400 for a bad request or id, 404 for nothing there, 503 for a failure worth retrying (the
/// store is down), 500 for one that is not.
function answerError(
  response: ServerResponse,
  code: ErrorCode,
  message?: string,
  retryAfterMs?: number,
): void {
  response.statusCode =
    code === 'bad-request' || code === 'bad-document-id'
      ? 400
      : code === 'not-found'
        ? 404
        : errors[code].retryable
          ? 503
          : 500;
  response.setHeader('content-type', 'application/json');
  response.end(JSON.stringify(errorBody(code, message, retryAfterMs)));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const port = Number(process.env['PORT'] ?? 4010);
  const example = await startExample(port, process.env['HOST'] ?? '127.0.0.1');
  console.log(`Tiptap example on ${example.url}/?doc=welcome: open it in two windows`);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => void example.close().then(() => process.exit(0)));
  }
}
