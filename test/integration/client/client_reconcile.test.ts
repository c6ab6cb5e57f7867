import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { Server } from 'socket.io';
import type { Node } from 'prosemirror-model';
import { EditorState, TextSelection } from 'prosemirror-state';
import { emptyDoc, schema } from '../../../schema/index.js';
import { type StepJSON, type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { openEditor } from '../../support/editors.js';
import { waitFor } from '../../support/wait.js';

const insert = (text: string, at: number, doc = emptyDoc()) =>
  EditorState.create({ doc }).tr.insertText(text, at).steps[0]!.toJSON() as StepJSON;

describe('client: a batch the server rebased differently', () => {
  it('rebuilds on the server’s version of the batch and moves later local steps onto it', async (t) => {
    // A scripted peer on a real Socket.io server: it confirms the client's "abc" as "ab", as a
    // server whose rebase dropped part of a batch would.
    const http = createServer();
    const io = new Server(http);
    const received: { version: number; steps: StepJSON[] }[] = [];
    let clientID = '';
    io.on('connection', (socket) => {
      clientID = socket.handshake.auth['clientID'] as string;
      socket.on('join', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
        ack({ ok: true, epoch: 'e', version: 0, doc: emptyDoc().toJSON() }),
      );
      socket.on(
        'steps',
        (request: { version: number; steps: StepJSON[] }, ack: (answer: StepsAnswer) => void) => {
          received.push(request);
          const version = request.version + (received.length === 1 ? 1 : request.steps.length);
          const steps = received.length === 1 ? [insert('ab', 1)] : request.steps;
          socket.emit('steps', { version, steps, clientIDs: steps.map(() => clientID) });
          ack({ ok: true, version });
        },
      );
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    const editor = openEditor(url, 'reconcile');
    t.after(() => {
      editor.close();
      io.close();
    });
    await editor.ready();
    let state = editor.state!;
    editor.dispatch(state.tr.insertText('abc', 1));
    // Typed while the batch is in flight: stays unconfirmed, after "abc".
    state = editor.state!;
    editor.dispatch(state.tr.insertText('Z', 4));
    await waitFor(
      () => received.length === 2 && !editor.hasUnconfirmed,
      'the second batch to be confirmed',
    );
    assert.equal(editor.reconciles, 1);
    assert.equal(editor.state!.doc.textContent, 'abZ');
    assert.equal(editor.version, 2);
    assert.deepEqual(JSON.parse(JSON.stringify(received[1]!)), {
      version: 1,
      steps: [
        insert(
          'Z',
          3,
          schema.node('doc', null, [schema.node('paragraph', null, [schema.text('ab')])]),
        ),
      ],
    });
  });
});

/// The document's textblocks' text, separated by `|`.
function paragraphsOf(doc: Node): string {
  const texts: string[] = [];
  doc.descendants((node) => {
    if (node.isTextblock) texts.push(node.textContent);
    return !node.isTextblock;
  });
  return texts.join('|');
}

/// A scripted peer that makes its editor reload: it joins the client on `before` (epoch `e`,
/// version 0), answers its first batch `history-gone`, the pull that follows with `after`
/// (epoch `e2`, version `version`), and accepts every later batch, which it keeps.
async function reloadingPeer(
  before: Node,
  after: Node,
  version: number,
): Promise<{ url: string; kept: { version: number; steps: StepJSON[] }[]; close(): void }> {
  const http = createServer();
  const io = new Server(http);
  const kept: { version: number; steps: StepJSON[] }[] = [];
  io.on('connection', (socket) => {
    const clientID = socket.handshake.auth['clientID'] as string;
    socket.on('join', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
      ack({ ok: true, epoch: 'e', version: 0, doc: before.toJSON() }),
    );
    let batches = 0;
    socket.on(
      'steps',
      (request: { version: number; steps: StepJSON[] }, ack: (answer: StepsAnswer) => void) => {
        if (batches++ === 0) {
          ack({ ok: false, code: 'history-gone', message: 'reset' } as StepsAnswer);
          return;
        }
        kept.push(request);
        const end = request.version + request.steps.length;
        socket.emit('steps', {
          version: end,
          steps: request.steps,
          clientIDs: request.steps.map(() => clientID),
        });
        ack({ ok: true, version: end });
      },
    );
    socket.on('pull', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
      ack({ ok: true, epoch: 'e2', version, doc: after.toJSON() }),
    );
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  return { url, kept, close: () => io.close() };
}

describe('client: a reload under local steps', () => {
  it('rebases local steps onto a reloaded document over what changed, so none is left past its end', async (t) => {
    // The document is a long paragraph; the client's first batch is answered history-gone,
    // and the pull that follows gets a document whose paragraph is short.
    const long = schema.node('doc', null, [
      schema.node('paragraph', null, [schema.text('x'.repeat(300))]),
    ]);
    const short = schema.node('doc', null, [
      schema.node('paragraph', null, [schema.text('short')]),
    ]);
    const { url, kept, close } = await reloadingPeer(long, short, 7);
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(url, 'reload', { onReload: (info) => reloads.push(info) });
    t.after(() => {
      editor.close();
      close();
    });
    await editor.ready();
    // At the start, and at the end of the long text: past the end of the short one, where
    // applied at its old position it would not fit. Rebased over the text's replacement,
    // it goes to the end of the new text.
    editor.dispatch(editor.state!.tr.insertText('A', 1).insertText('Z', 302));
    await waitFor(() => reloads.length === 1 && !editor.hasUnconfirmed, 'the reload');
    assert.deepEqual(reloads, [{ dropped: 0, reason: "the document's history was reset" }]);
    assert.equal(editor.state!.doc.textContent, 'AshortZ');
    // Both went out again, on the reloaded version, and were confirmed.
    assert.equal(kept.length, 1);
    assert.equal(kept[0]!.version, 7);
    assert.equal(kept[0]!.steps.length, 2);
    assert.equal(editor.version, 9);
  });

  it('follows a paragraph that others wrapped in a list with the text typed into it', async (t) => {
    // Others made the empty paragraph a list item and typed in it: comparing the two
    // documents finds the paragraph inside the list, so the offline text goes there, after
    // theirs, as prosemirror-collab would place two insertions at one point.
    const wrapped = schema.node('doc', null, [
      schema.node('ordered_list', null, [
        schema.node('list_item', null, [schema.node('paragraph', null, [schema.text('theirs ')])]),
      ]),
    ]);
    const { url, kept, close } = await reloadingPeer(emptyDoc(), wrapped, 3);
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(url, 'wrapped', { onReload: (info) => reloads.push(info) });
    t.after(() => {
      editor.close();
      close();
    });
    await editor.ready();
    // Typed, then more at its end and in its middle: all of it follows into the list.
    editor.dispatch(editor.state!.tr.insertText('mine', 1));
    editor.dispatch(editor.state!.tr.insertText('!', 5));
    editor.dispatch(editor.state!.tr.insertText('?', 3));
    await waitFor(() => reloads.length === 1 && !editor.hasUnconfirmed, 'the reload');
    assert.deepEqual(reloads, [{ dropped: 0, reason: "the document's history was reset" }]);
    const expected = schema.node('doc', null, [
      schema.node('ordered_list', null, [
        schema.node('list_item', null, [
          schema.node('paragraph', null, [schema.text('theirs mi?ne!')]),
        ]),
      ]),
    ]);
    assert.ok(editor.state!.doc.eq(expected), editor.state!.doc.toString());
    assert.equal(kept.length, 1);
    assert.equal(editor.version, 3 + kept[0]!.steps.length);
  });
  it('follows paragraphs wrapped in a list with typing, Enter and deletions made in them offline', async (t) => {
    const p = (text: string) => schema.node('paragraph', null, text ? [schema.text(text)] : []);
    const item = (...paragraphs: Node[]) => schema.node('list_item', null, paragraphs);
    const before = schema.node('doc', null, [p('a'), p('one'), p('two'), p('gone'), p('b')]);
    const after = schema.node('doc', null, [
      p('a'),
      schema.node('bullet_list', null, [item(p('one')), item(p('two')), item(p('gone'))]),
      p('b'),
    ]);
    const { url, close } = await reloadingPeer(before, after, 5);
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(url, 'wrapped-list', { onReload: (info) => reloads.push(info) });
    t.after(() => {
      editor.close();
      close();
    });
    await editor.ready();
    const type = (text: string, at: number) =>
      editor.dispatch(editor.state!.tr.insertText(text, at));
    // The end of the first textblock whose text starts with `prefix`.
    const endOf = (prefix: string) => {
      let end = -1;
      editor.state!.doc.descendants((node, pos) => {
        if (end < 0 && node.isTextblock && node.textContent.startsWith(prefix))
          end = pos + node.nodeSize - 1;
        return !node.isTextblock;
      });
      return end;
    };
    // "one": typed at its end, then Enter, then more; "two": typed at its end; "gone":
    // typed into, then all of it deleted, then typed again.
    type('AAA', endOf('one'));
    editor.dispatch(editor.state!.tr.split(endOf('oneAAA')));
    type('world', endOf('oneAAA') + 2);
    type('BBB', endOf('two'));
    type('xy', endOf('gone'));
    const gone = endOf('gonexy');
    editor.dispatch(editor.state!.tr.delete(gone - 6, gone));
    type('Q', gone - 6);
    assert.equal(
      paragraphsOf(editor.state!.doc),
      'a|oneAAA|world|twoBBB|Q|b',
      'the edits as made offline',
    );
    // The cursor inside text of our own that is still unconfirmed: "wor|ld".
    const cursor = endOf('world') - 2;
    editor.dispatch(editor.state!.tr.setSelection(TextSelection.create(editor.state!.doc, cursor)));
    await waitFor(() => reloads.length === 1 && !editor.hasUnconfirmed, 'the reload');
    assert.deepEqual(reloads, [{ dropped: 0, reason: "the document's history was reset" }]);
    const expected = schema.node('doc', null, [
      p('a'),
      schema.node('bullet_list', null, [
        item(p('oneAAA'), p('world')),
        item(p('twoBBB')),
        item(p('Q')),
      ]),
      p('b'),
    ]);
    assert.ok(editor.state!.doc.eq(expected), editor.state!.doc.toString());
    const { $head, empty } = editor.state!.selection;
    assert.ok(empty);
    assert.equal(`${$head.parent.textContent}@${$head.parentOffset}`, 'world@3');
  });
});
