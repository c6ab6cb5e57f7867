// The hostile corpus harness: one attacked document with its sockets, the raw sends a case
// makes, and the checks that a case was answered as its table says.

import assert from 'node:assert/strict';
import { get as httpGet } from 'node:http';
import { Node } from 'prosemirror-model';
import type { Socket } from 'socket.io-client';
import type { CollabClient } from '../../client/index.js';
import { isErrorCode } from '../../schema/errors.js';
import { schema } from '../../schema/index.js';
import { openEditor } from './editors.js';
import { assertCoded, firstTextPos, RawJson, readServed, type Served } from './hostile.js';
import { ask, rawSocket } from './socket.js';
import { waitFor } from './wait.js';
import type { Ctx, HandshakeCase, MessageCase } from '../fixtures/hostile/build.js';

export interface Outcome {
  ack?: unknown;
  protocolErrors: { code: string; message: string; event: string }[];
  disconnected: boolean;
  relayed: boolean;
  connectError?: { code?: string };
  connected?: boolean;
}

/// One attacked document with its sockets: the attacker (joined, recreated when the server
/// drops it), a read-only observer, a watcher that counts relayed presences, and an honest
/// editor on the real client library.
export class Corpus {
  readonly url: string;
  readonly docId: string;
  honest!: CollabClient;
  attacker!: Socket;
  readonly!: Socket;
  watcher!: Socket;
  private attackerErrors: Outcome['protocolErrors'] = [];
  private attackerGone = false;
  private presences = 0;
  private attackers = 0;

  constructor(url: string, docId: string) {
    this.url = url;
    this.docId = docId;
  }

  async open(): Promise<void> {
    this.honest = openEditor(this.url, this.docId, { clientID: 'honest' });
    await within(this.honest.ready(), 'the honest editor');
    this.readonly = rawSocket(this.url, this.docId, { clientID: 'observer', readOnly: true });
    assert.equal((await ask<{ ok: boolean }>(this.readonly, 'join', {})).ok, true);
    this.watcher = rawSocket(this.url, this.docId, 'watcher');
    this.watcher.on('presence', () => this.presences++);
    assert.equal((await ask<{ ok: boolean }>(this.watcher, 'join', {})).ok, true);
    await this.ensureAttacker();
  }

  close(): void {
    this.honest.close();
    this.attacker.close();
    this.readonly.close();
    this.watcher.close();
  }

  async ensureAttacker(): Promise<void> {
    if (this.attacker && !this.attackerGone) return;
    this.attacker?.close();
    const socket = rawSocket(this.url, this.docId, `attacker-${this.attackers++}`);
    this.attackerGone = false;
    socket.on('protocol-error', (error: Outcome['protocolErrors'][number]) =>
      this.attackerErrors.push(error),
    );
    socket.on('disconnect', () => {
      if (socket === this.attacker) this.attackerGone = true;
    });
    this.attacker = socket;
    assert.equal((await ask<{ ok: boolean }>(socket, 'join', {})).ok, true);
  }

  async served(): Promise<Served> {
    return readServed(this.url, this.docId);
  }

  /// Sends one case's message and collects what came back.
  async send(c: MessageCase, ctx: Ctx): Promise<Outcome> {
    await this.ensureAttacker();
    let socket = this.attacker;
    let errorsSeen = this.attackerErrors;
    if (c.from === 'readonly') socket = this.readonly;
    if (c.from === 'unjoined') {
      socket = rawSocket(this.url, this.docId, 'unjoined');
      errorsSeen = [];
      socket.on('protocol-error', (error: Outcome['protocolErrors'][number]) =>
        errorsSeen.push(error),
      );
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    }
    errorsSeen.length = 0;
    const presencesBefore = this.presences;
    const outcome: Outcome = { protocolErrors: errorsSeen, disconnected: false, relayed: false };
    const gone = new Promise<'gone'>((resolve) => socket.once('disconnect', () => resolve('gone')));
    try {
      const args = c.args(ctx);
      const event = (c.event ?? 'steps') as string;
      const emitted = new Promise<unknown>((resolve) => {
        const ack = c.ack === false ? null : resolve;
        if (args.some((arg) => arg instanceof RawJson)) rawEmit(socket, event, args, ack);
        else if (ack) socket.emit(event, ...args, ack);
        else socket.emit(event, ...args);
      });
      // A message expected to be answered by a protocol-error (or by nothing) is followed by a
      // pull: answers come back in order, so once the pull is answered everything the message
      // caused has. Anything else waits for its acknowledgement (an accepted batch is answered
      // only once it is durable).
      const answeredElsewhere =
        c.ack === false || c.expect.startsWith('protocol-error:') || c.expect === 'relayed';
      const probe = answeredElsewhere
        ? ask(socket, 'pull', {}).then(() => 'probed' as const)
        : new Promise<never>(() => {});
      const timeout = new Promise<'timeout'>((resolve) => setTimeout(resolve, 10_000, 'timeout'));
      const first = await Promise.race([c.ack === false ? probe : emitted, probe, gone, timeout]);
      assert.notEqual(first, 'timeout', `${c.name}: an answer within 10 s`);
      if (first === 'gone') {
        outcome.disconnected = true;
      } else if (first !== 'probed') {
        outcome.ack = first;
      } else if (c.ack !== false) {
        // The pull was answered first: the message got no acknowledgement (it went to a
        // protocol-error); give a late one a moment anyway so a wrong answer is not missed.
        outcome.ack = await Promise.race([emitted, new Promise((r) => setTimeout(r, 20))]);
      }
      if (c.expect === 'relayed') {
        await waitFor(() => this.presences > presencesBefore, 'the presence to be relayed', 5000);
        outcome.relayed = true;
      }
    } finally {
      if (c.from === 'unjoined') socket.close();
    }
    outcome.protocolErrors = [...errorsSeen];
    return outcome;
  }

  /// The honest editor types one character and must be acknowledged at the next version.
  async honestEdit(what: string): Promise<void> {
    await within(this.honest.settled(), 'the honest editor');
    // Catch up with what the attacker got accepted, so the edit is made at the served version.
    const version = (await this.served()).version;
    await waitFor(() => this.honest.version === version, `${what}: the honest editor catches up`);
    const state = this.honest.state!;
    const before = this.honest.version;
    this.honest.dispatch(state.tr.insertText('h', firstTextPos(state.doc)));
    await within(this.honest.settled(), 'the honest editor');
    assert.equal(
      this.honest.acknowledgedVersion,
      before + 1,
      `${what}: the honest edit is acknowledged`,
    );
    const served = await this.served();
    assert.equal(served.version, before + 1, `${what}: the honest edit is served`);
    assert.deepEqual(
      served.doc,
      JSON.parse(JSON.stringify(this.honest.state!.doc.toJSON())),
      `${what}: the honest editor sees the served document`,
    );
  }
}

/// `promise`, or a failure after `ms`: a broken server fails the test instead of hanging it.
export function within<T>(promise: Promise<T>, what: string, ms = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

let rawAckId = 1_000_000;

/// Emits `event` with `args` written as JSON text by hand (RawJson arguments as they are),
/// through the socket's engine: a Socket.IO EVENT packet, with an acknowledgement id registered
/// on the socket when `ack` is given.
export function rawEmit(
  socket: Socket,
  event: string | number,
  args: unknown[],
  ack: ((answer: unknown) => void) | null,
): void {
  const parts = [JSON.stringify(event)];
  for (const arg of args) parts.push(arg instanceof RawJson ? arg.text : JSON.stringify(arg));
  let packet = '2';
  if (ack) {
    const id = rawAckId++;
    (socket as unknown as { acks: Record<number, (answer: unknown) => void> }).acks[id] = ack;
    packet += String(id);
  }
  socket.io.engine.write(`${packet}[${parts.join(',')}]`);
}

export function assertOutcome(c: MessageCase, outcome: Outcome, before: Served): void {
  const what = c.name;
  for (const error of outcome.protocolErrors) {
    assert.ok(
      isErrorCode(error.code),
      `${what}: protocol-error code ${error.code} is in the table`,
    );
    assert.ok(
      typeof error.event === 'string' && error.event.length <= 64,
      `${what}: the event echoed is short`,
    );
  }
  if (c.expect === 'disconnected') {
    assert.equal(outcome.disconnected, true, `${what}: the connection is closed`);
    return;
  }
  assert.equal(outcome.disconnected, false, `${what}: the connection stays open`);
  if (c.expect === 'relayed') {
    assert.equal(outcome.relayed, true, what);
    assert.deepEqual(outcome.protocolErrors, [], `${what}: no protocol error`);
    return;
  }
  if (c.expect.startsWith('protocol-error:')) {
    const code = c.expect.slice('protocol-error:'.length);
    assert.equal(outcome.ack, undefined, `${what}: no acknowledgement`);
    assert.ok(
      outcome.protocolErrors.some((error) => error.code === code),
      `${what}: a protocol-error ${code} (got ${JSON.stringify(outcome.protocolErrors)})`,
    );
    return;
  }
  if (c.expect === 'accepted') {
    const answer = outcome.ack as { ok: boolean; version: number; message?: string };
    assert.equal(answer?.ok, true, `${what}: accepted (got ${JSON.stringify(answer)})`);
    assert.ok(answer.version > before.version, `${what}: at a new version`);
    return;
  }
  if (c.expect === 'answered') {
    const answer = outcome.ack as { ok: boolean; version: number };
    assert.equal(
      answer?.ok,
      true,
      `${what}: answered (got ${JSON.stringify(answer)?.slice(0, 200)})`,
    );
    assert.equal(answer.version, before.version, `${what}: at the served version`);
    return;
  }
  assertCoded(outcome.ack, c.expect, what);
  const version = (outcome.ack as { version?: unknown }).version;
  if (version !== undefined)
    assert.equal(version, before.version, `${what}: the refusal carries the version`);
  assert.deepEqual(
    outcome.protocolErrors,
    [],
    `${what}: no protocol error beside the acknowledgement`,
  );
}

/// Connects with `query` and `auth`; resolves with the connect_error's data, or `connected`.
export async function handshake(url: string, c: HandshakeCase): Promise<Outcome> {
  const outcome: Outcome = { protocolErrors: [], disconnected: false, relayed: false };
  if (typeof c.query === 'string') {
    const data = await pollingHandshake(url, c.query, c.auth, c.binds !== undefined);
    if (data === 'connected') outcome.connected = true;
    else outcome.connectError = data;
    return outcome;
  }
  const socket = rawSocket(url, c.query, c.auth as Record<string, unknown>);
  try {
    await new Promise<void>((resolve) => {
      socket.once('connect', () => {
        outcome.connected = true;
        resolve();
      });
      socket.once('connect_error', (err: Error & { data?: { code?: string } }) => {
        outcome.connectError = err.data ?? {};
        resolve();
      });
    });
  } finally {
    socket.close();
  }
  return outcome;
}

/// The Engine.IO/Socket.IO handshake by hand over HTTP long-polling, with a raw query string:
/// what a client library would never send (`?doc=A&doc=B`). Resolves with the connect error's
/// data or `connected`.
async function pollingHandshake(
  url: string,
  query: string,
  auth: unknown,
  join: boolean,
): Promise<{ code?: string } | 'connected'> {
  const base = `${url}/socket.io/?EIO=4&transport=polling`;
  const open = await (await fetch(`${base}&${query}`)).text();
  assert.ok(open.startsWith('0'), `engine.io open packet: ${open}`);
  const sid = (JSON.parse(open.slice(1)) as { sid: string }).sid;
  const post = await fetch(`${base}&sid=${sid}`, {
    method: 'POST',
    body: `40${auth instanceof RawJson ? auth.text : JSON.stringify(auth)}`,
    headers: { 'content-type': 'text/plain;charset=UTF-8' },
  });
  assert.equal(await post.text(), 'ok');
  const reply = await (await fetch(`${base}&sid=${sid}`)).text();
  const packet = reply.split('\x1e')[0]!;
  if (packet.startsWith('40') && join) {
    await fetch(`${base}&sid=${sid}`, { method: 'POST', body: '420["join",{}]' });
    let answered = false;
    for (let i = 0; i < 20 && !answered; i++) {
      const packets = (await (await fetch(`${base}&sid=${sid}`)).text()).split('\x1e');
      answered = packets.some((received) => received.startsWith('430[{"ok":true'));
    }
    assert.ok(answered, 'the join over polling is answered');
  }
  await fetch(`${base}&sid=${sid}`, { method: 'POST', body: '1' }).catch(() => {});
  if (packet.startsWith('40')) return 'connected';
  assert.ok(packet.startsWith('44'), `a connect error packet: ${packet}`);
  return (JSON.parse(packet.slice(2)) as { data?: { code?: string } }).data ?? {};
}

/// GET `path` exactly as written.
export function rawGet(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpGet({ host: '127.0.0.1', port, path }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('error', reject);
  });
}

export function toCtx(served: Served): Ctx {
  return { doc: Node.fromJSON(schema, served.doc), version: served.version };
}
