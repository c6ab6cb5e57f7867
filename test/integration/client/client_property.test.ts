import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import type { CollabClient } from '../../../client/index.js';
import { schema } from '../../../schema/index.js';
import { openEditor, waitConverged } from '../../support/editors.js';
import { startServer, type TestServer } from '../../support/server.js';
import { delay } from '../../support/wait.js';

// A property of the client library against a real server: editors insert unique words while
// their connections drop at random moments (a batch in flight, its broadcast or acknowledgement
// on the way, a backlog typed offline). Afterwards every editor holds the server's document,
// every word typed is in it exactly once, and every step the server holds is reported
// acknowledged to its editor exactly once, at the versions it holds it at.
//
// Words are only ever inserted at word boundaries (a new paragraph between two others, or at
// the start or end of a paragraph, with a space on either side: two inserted at one place go
// side by side), and nothing is deleted, so no rebase can cut or join words: a word missing or
// doubled is an edit lost or applied twice.
//
// CLIENT_PROPERTY_SEED replays a run; CLIENT_PROPERTY_RUNS makes more of them.

const seed = Number(process.env['CLIENT_PROPERTY_SEED'] ?? 20240611);
const numRuns = Number(process.env['CLIENT_PROPERTY_RUNS'] ?? 25);
const editorsPerRun = 3;

type Action =
  | { op: 'edit'; editor: number; where: 'between' | 'start' | 'end'; at: number }
  | { op: 'edit-and-drop'; editor: number; at: number }
  | { op: 'drop'; editor: number }
  | { op: 'offline'; editor: number }
  | { op: 'online'; editor: number }
  | { op: 'pause'; ms: number };

const editorIndex = fc.integer({ min: 0, max: editorsPerRun - 1 });
const fraction = fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true });
const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      op: fc.constant('edit' as const),
      editor: editorIndex,
      where: fc.constantFrom('between' as const, 'start' as const, 'end' as const),
      at: fraction,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('edit-and-drop' as const),
      editor: editorIndex,
      at: fraction,
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('drop' as const), editor: editorIndex }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('offline' as const), editor: editorIndex }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('online' as const), editor: editorIndex }) },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('pause' as const),
      ms: fc.integer({ min: 0, max: 25 }),
    }),
  },
);

/// Inserts `word` into the editor's document at a boundary chosen by `where` and `at`.
function insertWord(editor: CollabClient, word: string, where: Action & { op: 'edit' }): void {
  const state = editor.state!;
  const doc = state.doc;
  const index = Math.floor(where.at * doc.childCount);
  let pos = 0;
  for (let i = 0; i < index; i++) pos += doc.child(i).nodeSize;
  if (where.where === 'between') {
    // Before the index-th paragraph (or at the very end).
    const at = where.at * (doc.childCount + 1) >= doc.childCount ? doc.content.size : pos;
    editor.dispatch(state.tr.insert(at, schema.node('paragraph', null, [schema.text(word)])));
  } else if (where.where === 'start') {
    editor.dispatch(state.tr.insertText(` ${word} `, pos + 1));
  } else {
    editor.dispatch(state.tr.insertText(` ${word} `, pos + doc.child(index).nodeSize - 1));
  }
}

/// Closes the editor's transport under its socket, as a network failure would; Socket.io
/// reconnects by itself. Only an open one: closing one still opening leaves socket.io-client's
/// reconnection waiting for an event that never comes (a network failure then errors instead).
function dropTransport(editor: CollabClient): void {
  const engine = editor.socket.io.engine;
  if (engine && engine.readyState === 'open') engine.close();
}

/// Every word of `doc`, with how often it occurs.
function wordCounts(doc: Node): Map<string, number> {
  const counts = new Map<string, number>();
  doc.forEach((paragraph) => {
    for (const word of paragraph.textContent.split(' ')) {
      if (word !== '') counts.set(word, (counts.get(word) ?? 0) + 1);
    }
  });
  return counts;
}

/// The document's paragraphs' text, separated by `|`, for messages.
function paragraphs(doc: Node): string {
  const texts: string[] = [];
  doc.forEach((paragraph) => texts.push(paragraph.textContent));
  return texts.join('|');
}

// Run twice: with the default history, where every catch-up is by steps and every step the
// server holds can be traced to one acknowledgement; and with a history of three steps, where
// an editor back from offline mostly catches up by whole document and its unconfirmed steps
// are rebased onto it (`CollabClient` compares the documents), which must not lose a word
// either.
for (const variant of [
  { name: '', overrides: {}, wholeHistory: true },
  { name: ', history of 3 steps', overrides: { maxHistorySteps: 3 }, wholeHistory: false },
]) {
  describe(`client property: edits and random disconnects${variant.name}`, () => {
    let server: TestServer;
    before(async () => {
      server = await startServer(variant.overrides);
    });
    after(async () => {
      await server.close();
    });

    it(`every word typed ends in every editor's document exactly once, and every step is acknowledged once (seed ${seed})`, async () => {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(action, { minLength: 10, maxLength: 40 }), async (actions) => {
          const docId = `client-property-${seed}-${run++}`;
          const acked: { editor: number; version: number; steps: number }[] = [];
          const editors = Array.from({ length: editorsPerRun }, (_, i) =>
            openEditor(server.url, docId, {
              clientID: `${docId}-e${i}`,
              reconnectDelayMs: 20,
              reconnectDelayMaxMs: 200,
              onAcknowledged: (version, steps) =>
                acked.push({ editor: i, version, steps: steps.length }),
            }),
          );
          const typed: string[] = [];
          try {
            await Promise.all(editors.map((editor) => editor.ready()));
            // The document starts with one paragraph of its first word, so every editor has one.
            insertWord(editors[0]!, 'w0', { op: 'edit', editor: 0, where: 'end', at: 0 });
            typed.push('w0');
            await editors[0]!.settled();
            for (const step of actions) {
              if (step.op === 'pause') {
                await delay(step.ms);
                continue;
              }
              const editor = editors[step.editor]!;
              if (step.op === 'edit' || step.op === 'edit-and-drop') {
                const word = `w${typed.length}`;
                typed.push(word);
                const where =
                  step.op === 'edit'
                    ? step
                    : { ...step, op: 'edit' as const, where: 'end' as const };
                insertWord(editor, word, where);
                if (step.op === 'edit-and-drop') dropTransport(editor);
              } else if (step.op === 'drop') {
                dropTransport(editor);
              } else if (step.op === 'offline') {
                editor.socket.disconnect();
              } else if (editor.socket.disconnected) {
                editor.socket.connect();
              }
            }
            for (const editor of editors) if (editor.socket.disconnected) editor.socket.connect();
            const room = () => server.server.rooms.peek(docId)!;
            await waitConverged(editors, () => room().publishedVersion, 20_000);

            const served = room().publishedDoc;
            for (const editor of editors) {
              assert.ok(
                editor.state!.doc.eq(served),
                `${editor.clientID} diverged from the server`,
              );
            }
            const counts = wordCounts(served);
            for (const word of typed) {
              assert.equal(
                counts.get(word) ?? 0,
                1,
                `${word} in the document: ${paragraphs(served)}`,
              );
            }
            assert.equal(counts.size, typed.length, 'no word nobody typed');

            // Every step the server holds is in exactly one acknowledged batch of its editor.
            if (!variant.wholeHistory) return;
            const history = room().sync({ version: 0, epoch: room().epoch });
            assert.ok(history.ok && 'steps' in history, 'the whole history is held');
            const reported = new Array<number>(history.steps.length).fill(0);
            for (const batch of acked) {
              for (let v = batch.version - batch.steps; v < batch.version; v++) {
                assert.equal(history.clientIDs[v], editors[batch.editor]!.clientID, `step ${v}`);
                reported[v]!++;
              }
            }
            assert.deepEqual(
              reported.map((count, v) => [v, count]).filter(([, count]) => count !== 1),
              [],
              'steps acknowledged other than once',
            );
          } finally {
            for (const editor of editors) editor.close();
          }
        }),
        { seed, numRuns, endOnFailure: true, includeErrorInReport: true },
      );
    });
  });
}
