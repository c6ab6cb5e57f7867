import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { schema } from '../../../schema/index.js';
import { Random, editRandomly, openEditor, waitConverged } from '../../support/editors.js';
import { startServer, type TestServer } from '../../support/server.js';

const seeds = (process.env['CONVERGENCE_SEEDS'] ?? '101,202,303,404,505,606')
  .split(',')
  .map((seed) => Number(seed));

// Each seed runs twice: with the server rebasing batches made at older versions (the default),
// and with prosemirror-collab's strict rule, where such batches are refused as stale.
const modes = [
  { name: 'rebasing', maxRebaseSteps: 1000 },
  { name: 'strict', maxRebaseSteps: 0 },
] as const;

for (const mode of modes)
  describe(`convergence: concurrent editors over real sockets (${mode.name})`, () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({ maxRebaseSteps: mode.maxRebaseSteps });
    });
    after(async () => {
      await server.close();
    });

    for (const seed of seeds) {
      it(`6 editors making random concurrent edits end equal to the server (seed ${seed})`, async (t) => {
        const docId = `convergence-${mode.name}-${seed}`;
        const editors = Array.from({ length: 6 }, (_, i) =>
          openEditor(server.url, docId, { clientID: `s${seed}-e${i}` }),
        );
        t.after(() => {
          for (const editor of editors) editor.close();
        });
        await Promise.all(editors.map((editor) => editor.ready()));
        const made = await Promise.all(
          editors.map((editor, i) => editRandomly(editor, new Random(seed * 31 + i), 40, 12)),
        );
        const room = () => server.server.rooms.peek(docId)!;
        await waitConverged(editors, () => room().publishedVersion);
        const response = await fetch(`${server.url}/docs/${docId}`);
        const served = (await response.json()) as { version: number; doc: unknown };
        for (const editor of editors) {
          assert.ok(
            editor.state!.doc.eq(schema.nodeFromJSON(served.doc)),
            `seed ${seed}: ${editor.clientID} diverged from the server`,
          );
        }
        assert.ok(
          made.reduce((a, b) => a + b, 0) > 100,
          `seed ${seed}: too few edits were made to mean anything`,
        );
        assert.ok(
          served.version >= 100,
          `seed ${seed}: only ${served.version} steps were accepted`,
        );
        // Contention must really have happened, or the test proves nothing.
        if (mode.maxRebaseSteps > 0) {
          assert.ok(room().rebasedBatches > 0, `seed ${seed}: no batch was rebased`);
        } else {
          assert.ok(
            editors.some((editor) => editor.staleAnswers > 0),
            `seed ${seed}: no batch was ever stale`,
          );
        }
      });
    }
  });
