import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import { getVersion, sendableSteps } from 'prosemirror-collab';
import { pino } from 'pino';
import { Server } from 'socket.io';
import type { CollabClient } from '../../../client/index.js';
import {
  createCollab,
  MemoryStore,
  type Authenticate,
  type Collab,
} from '../../../server/index.js';
import { roomsOf } from '../../../server/collab.js';
import { editRandomly, openEditor, Random, waitConverged } from '../../support/editors.js';

// The history against real editors on real sockets: several users type at once (their
// batches rebased by the server), and afterwards the document documentAt rebuilds for each
// version is the one the editors had at it, every inserted span names one of them, and a
// restore brings every connected editor to the old document.
//
// HISTORY_EDITORS_SEED replays a run; HISTORY_EDITORS_RUNS makes more of them.

const seed = Number(process.env['HISTORY_EDITORS_SEED'] ?? 20261128);
const numRuns = Number(process.env['HISTORY_EDITORS_RUNS'] ?? 5);
const users = ['ann', 'bob', 'cy'];

const authenticate: Authenticate = ({ auth }) => {
  const user = String(auth['token']);
  if (!users.includes(user)) throw new Error('no such token');
  return { user, access: 'write' };
};

async function startHost(): Promise<{ collab: Collab; url: string; close(): Promise<void> }> {
  const collab = createCollab({
    store: new MemoryStore(),
    authenticate,
    logger: pino({ level: process.env['TEST_LOG_LEVEL'] ?? 'silent' }),
    limits: { snapshotEverySteps: 8, batchesPerSecond: 0, pullsPerSecond: 0 },
  });
  const http = createServer();
  const io = new Server(http, collab.socketOptions);
  collab.attach(io);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    collab,
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    async close() {
      await collab.close();
      await new Promise<void>((resolve) => io.close(() => resolve()));
    },
  };
}

describe('history with editors on real sockets', () => {
  it('documentAt(v) is what the editors had at v; restore reaches every editor', async () => {
    const host = await startHost();
    let run = 0;
    try {
      await fc.assert(
        fc.asyncProperty(fc.integer({ min: 1, max: 2 ** 31 - 1 }), async (runSeed) => {
          const docId = `history-editors-${run++}`;
          // Every confirmed document an editor held, by version.
          const seen = new Map<number, Node>();
          const editors: CollabClient[] = users.map((user) =>
            openEditor(host.url, docId, {
              token: user,
              onState: (state) => {
                if (sendableSteps(state) === null) seen.set(getVersion(state), state.doc);
              },
            }),
          );
          try {
            await Promise.all(editors.map((editor) => editor.ready()));
            const random = new Random(runSeed);
            await Promise.all(
              editors.map((editor, i) =>
                editRandomly(editor, new Random(random.int(1, 1e9) + i), 12, 8),
              ),
            );
            const rooms = roomsOf(host.collab);
            await waitConverged(editors, () => rooms.peek(docId)!.publishedVersion);
            const version = rooms.peek(docId)!.publishedVersion;
            assert.ok(seen.size > 1, 'editors saw versions');
            for (const [v, doc] of seen) {
              const at = await host.collab.documentAt(docId, v);
              assert.ok(at.doc.eq(doc), `version ${v} of ${version}`);
            }
            const { changes } = await host.collab.changes(docId, 0, version);
            for (const change of changes)
              for (const span of change.inserted)
                assert.ok(users.includes(span.user!), `${span.user}`);
            const target = Math.floor(version / 2);
            const old = (await host.collab.documentAt(docId, target)).doc;
            const restored = await host.collab.restore(docId, target, { user: 'ann' });
            await waitConverged(editors, () => restored);
            for (const editor of editors) assert.ok(editor.state!.doc.eq(old), 'editor restored');
          } finally {
            for (const editor of editors) editor.close();
          }
        }),
        { seed, numRuns, endOnFailure: true },
      );
    } finally {
      await host.close();
    }
  });
});
