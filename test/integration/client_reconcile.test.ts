import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { Server } from 'socket.io';
import { EditorState } from 'prosemirror-state';
import {
  emptyDoc,
  schema,
  type StepJSON,
  type StepsAnswer,
  type SyncAnswer,
} from '../../schema/index.js';
import { openEditor } from '../support/editors.js';
import { waitFor } from '../support/wait.js';

const insert = (text: string, at: number, doc = emptyDoc()) =>
  EditorState.create({ doc }).tr.insertText(text, at).steps[0]!.toJSON() as StepJSON;

describe('client: a batch the server rebased differently', () => {
  it('rebuilds on the server’s version of the batch and moves later local steps onto it', async () => {
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
    try {
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
    } finally {
      editor.close();
      io.close();
    }
  });
});

describe('client: a reload under local steps', () => {
  it('drops a local step whose positions are past the end of the reloaded document, and keeps the others', async () => {
    // A scripted peer: the document is a long paragraph; the client's first batch is answered
    // history-gone, and the pull that follows gets a document whose paragraph is short.
    const http = createServer();
    const io = new Server(http);
    const long = schema.node('doc', null, [
      schema.node('paragraph', null, [schema.text('x'.repeat(300))]),
    ]);
    const short = schema.node('doc', null, [
      schema.node('paragraph', null, [schema.text('short')]),
    ]);
    const kept: { version: number; steps: StepJSON[] }[] = [];
    io.on('connection', (socket) => {
      const clientID = socket.handshake.auth['clientID'] as string;
      socket.on('join', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
        ack({ ok: true, epoch: 'e', version: 0, doc: long.toJSON() }),
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
          const version = request.version + request.steps.length;
          socket.emit('steps', {
            version,
            steps: request.steps,
            clientIDs: request.steps.map(() => clientID),
          });
          ack({ ok: true, version });
        },
      );
      socket.on('pull', (_request: unknown, ack: (answer: SyncAnswer) => void) =>
        ack({ ok: true, epoch: 'e2', version: 7, doc: short.toJSON() }),
      );
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    const reloads: { dropped: number; reason: string }[] = [];
    const editor = openEditor(url, 'reload', { onReload: (info) => reloads.push(info) });
    try {
      await editor.ready();
      // At the start (fits any document) and at the end of the long text (past the short one).
      editor.dispatch(editor.state!.tr.insertText('A', 1).insertText('Z', 302));
      await waitFor(() => reloads.length === 1 && !editor.hasUnconfirmed, 'the reload');
      assert.deepEqual(reloads, [{ dropped: 1, reason: "the document's history was reset" }]);
      assert.equal(editor.state!.doc.textContent, 'Ashort');
      // The step that fits went out again, on the reloaded version, and was confirmed.
      assert.equal(kept.length, 1);
      assert.equal(kept[0]!.version, 7);
      assert.equal(editor.version, 8);
    } finally {
      editor.close();
      io.close();
    }
  });
});
