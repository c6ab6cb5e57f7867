import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CollabClient } from '../../client/index.js';
import { openEditor } from '../support/editors.js';
import { startServer } from '../support/server.js';
import { waitFor } from '../support/wait.js';

/// Types `text` at the end of the editor's first paragraph, as one step.
function type(editor: CollabClient, text: string): void {
  const state = editor.state!;
  editor.dispatch(state.tr.insertText(text, state.doc.firstChild!.nodeSize - 1));
}

describe('client: a batch refused as too-large', () => {
  it('is sent again in halves: every step before the one the server will not take is kept', async () => {
    // Documents up to 4 KB: one insert of 5,000 characters is refused on its own.
    const server = await startServer({ maxDocBytes: 4096 });
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(server.url, 'split-batches', {
      onReload: (info) => reloads.push(info),
    });
    try {
      await waitFor(() => editor.status === 'synced', 'the editor to join');
      // One step goes out at once; the next six queue behind it and go as one batch, whose
      // last step the server refuses: the five before it must not be lost with it.
      type(editor, 'a');
      for (const letter of 'bcdef') type(editor, letter);
      type(editor, 'x'.repeat(5000));
      await waitFor(
        () => editor.status === 'synced' && !editor.hasUnconfirmed && reloads.length === 1,
        'the batch to be split, its steps confirmed but the last',
      );
      assert.equal(editor.state!.doc.textContent, 'abcdef');
      assert.deepEqual(reloads, [{ dropped: 1, reason: 'the server refused local steps' }]);
      assert.equal(editor.version, 6);
      const response = await fetch(`${server.url}/docs/split-batches`);
      const stored = (await response.json()) as { version: number; doc: unknown };
      assert.equal(stored.version, 6);
      assert.deepEqual(stored.doc, editor.state!.doc.toJSON());
      // Refused whole, then in halves until the step alone: at least three refusals.
      assert.ok((editor.refusals['too-large'] ?? 0) >= 3, JSON.stringify(editor.refusals));
    } finally {
      editor.close();
      await server.close();
    }
  });
});
