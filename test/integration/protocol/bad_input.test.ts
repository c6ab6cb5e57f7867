import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import type { Socket } from 'socket.io-client';
import { emptyDoc } from '../../../schema/index.js';
import { errors, isErrorCode } from '../../../schema/errors.js';
import { type StepsAnswer, type SyncAnswer } from '../../../schema/events.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';

const validStep = EditorState.create({ doc: emptyDoc() }).tr.insertText('hi', 1).steps[0]!.toJSON();

function connectError(socket: Socket): Promise<{ message: string; data?: { code: string } }> {
  return new Promise((resolve, reject) => {
    socket.once('connect', () => reject(new Error('connected')));
    socket.once('connect_error', (err) => resolve(err as Error & { data?: { code: string } }));
  });
}

/// Asserts that an answer is a refusal with `code`, in the shape of the error table.
function assertRefused(answer: StepsAnswer | SyncAnswer, code: string, what: string): void {
  assert.equal(answer.ok, false, `${what}: should be refused`);
  if (answer.ok) return;
  assert.equal(answer.code, code, `${what}: ${answer.message}`);
  assert.ok(isErrorCode(answer.code));
  assert.equal(
    answer.retryable,
    errors[answer.code].retryable,
    `${what}: retryable as in the table`,
  );
  assert.ok(answer.message.length > 0);
}

describe('bad input gets a coded error and changes nothing', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ maxStepsPerBatch: 5 });
  });
  after(async () => {
    await server.close();
  });

  it('refuses handshakes without a valid document id or client id', async () => {
    const cases: [Record<string, string>, Record<string, unknown>, string][] = [
      [{}, { clientID: 'a' }, 'bad-document-id'],
      [{ doc: '' }, { clientID: 'a' }, 'bad-document-id'],
      [{ doc: 'x'.repeat(129) }, { clientID: 'a' }, 'bad-document-id'],
      [{ doc: 'has space' }, { clientID: 'a' }, 'bad-document-id'],
      [{ doc: '../etc' }, { clientID: 'a' }, 'bad-document-id'],
      [{ doc: 'ok' }, {}, 'bad-client-id'],
      [{ doc: 'ok' }, { clientID: 42 }, 'bad-client-id'],
      [{ doc: 'ok' }, { clientID: 'x'.repeat(65) }, 'bad-client-id'],
      [{ doc: 'ok' }, { clientID: 'a', readOnly: 'yes' }, 'bad-request'],
    ];
    for (const [query, auth, code] of cases) {
      const socket = rawSocket(server.url, query, auth);
      const err = await connectError(socket);
      socket.close();
      assert.equal(err.data?.code, code, JSON.stringify({ query, auth }));
      assert.equal(err.message, errors[code as keyof typeof errors].message);
    }
  });

  it('refuses malformed join, pull and steps payloads with their codes', async (t) => {
    const docId = 'bad-input';
    const socket = rawSocket(server.url, { doc: docId }, { clientID: 'bad' });
    t.after(() => socket.close());
    assertRefused(
      await ask(socket, 'steps', { version: 0, steps: [validStep] }),
      'bad-request',
      'steps before join',
    );
    assertRefused(await ask(socket, 'pull', {}), 'bad-request', 'pull before join');
    assertRefused(
      await ask(socket, 'join', { version: 'x' }),
      'bad-request',
      'join with a string version',
    );
    assertRefused(await ask(socket, 'join', [1]), 'bad-request', 'join with an array');
    assertRefused(
      await ask(socket, 'join', { epoch: 7 }),
      'bad-request',
      'join with a numeric epoch',
    );
    const joined = await ask<SyncAnswer>(socket, 'join', {});
    assert.equal(joined.ok, true);
    assertRefused(
      await ask(socket, 'pull', { version: -1 }),
      'bad-request',
      'pull with a negative version',
    );

    const cases: [unknown, string, string][] = [
      ['steps', 'bad-request', 'a string payload'],
      [null, 'bad-request', 'a null payload'],
      [{ steps: [validStep] }, 'bad-request', 'no version'],
      [{ version: -1, steps: [validStep] }, 'bad-request', 'a negative version'],
      [{ version: 1.5, steps: [validStep] }, 'bad-request', 'a fractional version'],
      [{ version: '0', steps: [validStep] }, 'bad-request', 'a string version'],
      [{ version: 0, steps: 'x' }, 'bad-request', 'steps not an array'],
      [{ version: 0, steps: [] }, 'bad-request', 'an empty batch'],
      [{ version: 0, steps: [42] }, 'invalid-step', 'a step that is not an object'],
      [{ version: 0, steps: [{ stepType: 'teleport' }] }, 'invalid-step', 'an unknown step type'],
      [
        { version: 0, steps: [{ stepType: 'replace', from: 90, to: 95 }] },
        'invalid-step',
        'positions out of range',
      ],
      [
        { version: 0, steps: [validStep, { stepType: 'replace', from: 1, to: 'x' }] },
        'invalid-step',
        'a bad step after a good one',
      ],
      [
        {
          version: 0,
          steps: [
            {
              stepType: 'replace',
              from: 0,
              to: 0,
              slice: { content: [{ type: 'text', text: 'loose text in the document' }] },
            },
          ],
        },
        'invalid-step',
        'a batch that breaks the schema',
      ],
      [{ version: 0, steps: Array(6).fill(validStep) }, 'too-large', 'too many steps'],
      [{ version: 7, steps: [validStep] }, 'history-gone', 'a version ahead of the server'],
    ];
    for (const [payload, code, what] of cases) {
      assertRefused(await ask(socket, 'steps', payload), code, what);
    }

    // Nothing of the above changed the document.
    const response = await fetch(`${server.url}/docs/${docId}`);
    const served = (await response.json()) as { version: number; doc: unknown };
    assert.equal(served.version, 0);
    assert.deepEqual(served.doc, emptyDoc().toJSON());

    // And the socket is still usable: a valid batch goes through.
    const accepted = await ask<StepsAnswer>(socket, 'steps', { version: 0, steps: [validStep] });
    assert.deepEqual(accepted, { ok: true, version: 1 });
  });

  it('reports events without an acknowledgement, and unknown events, as protocol errors', async (t) => {
    const socket = rawSocket(server.url, { doc: 'protocol-errors' }, { clientID: 'p' });
    t.after(() => socket.close());
    const errorsSeen: { code: string; event: string }[] = [];
    socket.on('protocol-error', (error: { code: string; event: string }) => errorsSeen.push(error));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.emit('steps', { version: 0, steps: [validStep] });
    socket.emit('delete-everything', {});
    await ask(socket, 'join', {});
    assert.deepEqual(errorsSeen.map((error) => `${error.event}:${error.code}`).sort(), [
      'delete-everything:bad-request',
      'steps:bad-request',
    ]);
    const served = (await (await fetch(`${server.url}/docs/protocol-errors`)).json()) as {
      version: number;
    };
    assert.equal(served.version, 0);
  });

  it('answers join, pull and steps sent with an acknowledgement but no payload, through it', async (t) => {
    const socket = rawSocket(server.url, { doc: 'no-payload' }, { clientID: 'np' });
    t.after(() => socket.close());
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    for (const event of ['join', 'pull', 'steps']) {
      const answer = await new Promise<SyncAnswer>((resolve, reject) =>
        socket
          .timeout(2000)
          .emit(event, (err: Error | null, reply: SyncAnswer) =>
            err ? reject(new Error(`${event}: no answer`)) : resolve(reply),
          ),
      );
      assertRefused(answer, 'bad-request', event);
    }
  });

  it('keeps a document named like another socket`s id apart from that socket', async (t) => {
    // Socket.io puts every socket in a room named by its id, and a socket id is a valid
    // document id: the document's steps and presence must not reach that socket.
    const victim = rawSocket(server.url, { doc: 'victim-doc' }, { clientID: 'victim' });
    const seen: string[] = [];
    victim.on('steps', () => seen.push('steps'));
    victim.on('presence', () => seen.push('presence'));
    await new Promise<void>((resolve) => victim.once('connect', () => resolve()));
    const joined = await ask<SyncAnswer>(victim, 'join', {});
    assert.ok(joined.ok);
    const attacker = rawSocket(server.url, { doc: victim.id! }, { clientID: 'attacker' });
    t.after(() => {
      attacker.close();
      victim.close();
    });
    await new Promise<void>((resolve) => attacker.once('connect', () => resolve()));
    const own = await ask<SyncAnswer>(attacker, 'join', {});
    assert.ok(own.ok);
    const answer = await ask<StepsAnswer>(attacker, 'steps', {
      version: own.version,
      steps: [validStep],
    });
    assert.ok(answer.ok);
    attacker.emit('presence', { version: answer.version, anchor: 1, head: 1 });
    // A round trip of the victim's after both: anything sent to it has arrived by then.
    await ask(victim, 'pull', {});
    await ask(attacker, 'pull', {});
    await ask(victim, 'pull', {});
    assert.deepEqual(seen, []);
  });

  it('refuses steps from a read-only socket with forbidden', async (t) => {
    // A reader follows a document; a writer makes it.
    const writer = rawSocket(server.url, 'read-only', 'w');
    const socket = rawSocket(server.url, { doc: 'read-only' }, { clientID: 'r', readOnly: true });
    t.after(() => {
      writer.close();
      socket.close();
    });
    assert.equal((await ask<SyncAnswer>(writer, 'join', {})).ok, true);
    assert.equal((await ask<SyncAnswer>(socket, 'join', {})).ok, true);
    assertRefused(
      await ask(socket, 'steps', { version: 0, steps: [validStep] }),
      'forbidden',
      'read-only',
    );
  });

  it('answers HTTP requests for unknown or malformed ids with coded errors', async () => {
    const missing = await fetch(`${server.url}/docs/never-seen`);
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { code: string }).code, 'not-found');
    const unknown = await fetch(`${server.url}/no/such/route`);
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { code: string }).code, 'not-found');
    const badEncoding = await fetch(`${server.url}/docs/%E0%A4%A`);
    assert.equal(badEncoding.status, 400);
    assert.equal(((await badEncoding.json()) as { code: string }).code, 'bad-request');
    const malformed = await fetch(`${server.url}/docs/${'x'.repeat(200)}`);
    assert.equal(malformed.status, 400);
    assert.equal(((await malformed.json()) as { code: string }).code, 'bad-document-id');
  });
});
