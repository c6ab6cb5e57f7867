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
import { typist } from '../../support/history_gen.js';
import { delay } from '../../support/wait.js';
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

  it('changes attribute every character to its typist; revert takes one user back', async () => {
    const host = await startHost();
    const docId = 'history-attributed';
    const editors = users.map((user) => openEditor(host.url, docId, { token: user }));
    try {
      await Promise.all(editors.map((editor) => editor.ready()));
      const random = new Random(seed);
      // Each user types characters of their own block (see history_gen.ts) at random places,
      // and now and then deletes one, anyone's.
      await Promise.all(
        editors.map(async (editor, i) => {
          for (let n = 0; n < 25; n++) {
            await delay(random.int(0, 6));
            const state = editor.state!;
            const size = state.doc.content.size;
            const at = random.int(1, size - 1);
            if (!state.doc.resolve(at).parent.inlineContent) continue;
            if (
              random.int(0, 4) === 0 &&
              at < size - 1 &&
              state.doc.resolve(at + 1).parent.inlineContent
            ) {
              editor.dispatch(state.tr.delete(at, at + 1));
            } else {
              editor.dispatch(
                state.tr.insertText(String.fromCharCode(0x6000 + i * 0x0800 + n), at),
              );
            }
          }
        }),
      );
      const rooms = roomsOf(host.collab);
      await waitConverged(editors, () => rooms.peek(docId)!.publishedVersion);
      const head = rooms.peek(docId)!.publishedVersion;
      const doc = (await host.collab.documentAt(docId, head)).doc;
      const { changes } = await host.collab.changes(docId, 0, head);
      let attributed = 0;
      for (const change of changes) {
        let pos = change.fromB;
        for (const span of change.inserted) {
          for (const char of doc.textBetween(pos, pos + span.length)) {
            assert.equal(typist(char), span.user, `who typed ${char}`);
            attributed++;
          }
          pos += span.length;
        }
      }
      assert.equal(attributed, doc.textContent.length, 'every character is in a change');
      const others = [...doc.textContent].filter((char) => typist(char) !== 'bob');
      const result = await host.collab.revert(docId, { user: 'bob' }, { by: 'ann' });
      await waitConverged(editors, () => result.version);
      const after = editors[0]!.state!.doc.textContent;
      assert.ok(![...after].some((char) => typist(char) === 'bob'), 'bob wrote nothing left');
      for (const char of others) assert.ok(after.includes(char), `${char} by ${typist(char)} kept`);
    } finally {
      for (const editor of editors) editor.close();
      await host.close();
    }
  });
});
