import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { Node } from 'prosemirror-model';
import { EditorState, type Transaction } from 'prosemirror-state';
import { Step } from 'prosemirror-transform';
import type { Socket } from 'socket.io-client';
import { Random } from '../../../client-sim/random.js';
import { randomEdit } from '../../../client-sim/workload.js';
import { errors, isErrorCode } from '../../../schema/errors.js';
import { schema } from '../../../schema/index.js';
import { type StepJSON, type StepsBroadcast } from '../../../schema/events.js';
import { noAdmissionEnv, readServed } from '../../support/hostile.js';
import { startServerProcess, type ServerProcess } from '../../support/process.js';
import { rawSocket } from '../../support/socket.js';
import { delay, waitFor } from '../../support/wait.js';
import { stepTypeNames } from '../../../server/core/step_check.js';

// Property-based fuzzing against a live server (a child process, so that a crash is a crash
// and its RSS is its own): random JSON, valid steps made by real transactions on a replica,
// and those steps mutated (fields replaced, positions shifted, types swapped, nesting added,
// repeated, given hostile URLs, long strings, binary and prototype keys). Properties, per
// message: every acknowledgement is `{ok: true, version}` or a refusal with a code of the
// table and its `retryable`, never `internal`; every protocol-error carries a code of the
// table. Afterwards: the process is alive and logged no error, every document equals the
// replica built from its broadcasts, which hold every acknowledged batch under its sender's
// id, and RSS after a GC is within 64 MB of where it was before the fuzzing.
//
// FUZZ_RUNS (messages, default 10,000) and FUZZ_SECONDS (default 60, a bound: the run stops
// there even if fewer were sent) make it longer; FUZZ_SEED replays a run.

const totalRuns = Number(process.env['FUZZ_RUNS'] ?? 10_000);
const seconds = Number(process.env['FUZZ_SECONDS'] ?? 60);
const seed = Number(process.env['FUZZ_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
const documents = 4;
const writersPerDocument = 2;
/// RSS may grow by this much over the fuzzing, measured after a full GC at both ends, and the
/// V8 heap in use by this much (what the documents and their bounded histories may hold).
const rssSlackMB = 64;
const heapSlackMB = 32;

// Small limits, so that random messages cross them often and cheaply. The transport closes a
// connection on a message over 2 × MAX_MESSAGE_BYTES or with more than 10 binary attachments;
// such messages are not sent (the corpus covers those caps).
const maxMessageBytes = 32 * 1024;
const maxSendBytes = 60 * 1024;
const serverEnv: Record<string, string> = {
  ...noAdmissionEnv,
  STORE: 'memory',
  // Not the Redis of the test run's environment, which STORE=memory contradicts.
  REDIS_URL: '',
  MAX_STEPS_PER_BATCH: '40',
  MAX_DOC_SIZE: '50000',
  MAX_DOC_BYTES: String(128 * 1024),
  MAX_DOC_DEPTH: '12',
  MAX_JSON_DEPTH: '40',
  MAX_ATTRIBUTE_BYTES: '2048',
  MAX_MESSAGE_BYTES: String(maxMessageBytes),
  MAX_HISTORY_BYTES: String(1024 * 1024),
  MAX_HISTORY_STEPS: '500',
  NODE_OPTIONS: `--import=${new URL('../../support/gc_on_signal.js', import.meta.url).href}`,
};

// ----- what is generated -----

const stepTypes = stepTypeNames;
const reserved = new Set([
  'connect',
  'connect_error',
  'disconnect',
  'disconnecting',
  'newListener',
  'removeListener',
]);
const positionFields = ['from', 'to', 'gapFrom', 'gapTo', 'insert', 'pos'] as const;
const fields = [
  ...positionFields,
  'slice',
  'slice.content',
  'slice.openStart',
  'slice.openEnd',
  'mark',
  'mark.type',
  'mark.attrs',
  'attr',
  'value',
  'steps',
  'structure',
  'stepType',
] as const;
const urls = [
  'javascript:alert(1)',
  'JAVASCRIPT:alert(1)',
  'vbscript:msgbox(1)',
  'data:text/html,<script>alert(1)</script>',
  'data:image/svg+xml;base64,PHN2Zz4=',
  'java\tscript:alert(1)',
  ' javascript:alert(1)',
  '\u0000javascript:alert(1)',
  '',
  'https://example.com/ok',
  'mailto:someone@example.com',
  '/relative',
  'data:image/png;base64,iVBORw0KGgo=',
];

type Extra = 'none' | 'image' | 'attr' | 'nodeMark' | 'markSet';

type Mutation =
  | { op: 'set'; step: number; field: string; value: unknown }
  | { op: 'shift'; step: number; field: string; delta: number }
  | { op: 'type'; step: number; type: string }
  | { op: 'nest'; step: number; field: string; depth: number; asObject: boolean }
  | { op: 'drop'; step: number; field: string }
  | { op: 'repeat'; step: number; times: number }
  | { op: 'version'; delta: number }
  | { op: 'link'; step: number; href: string }
  | { op: 'long'; step: number; field: string; length: number }
  | { op: 'binary'; step: number; field: string }
  | { op: 'proto'; step: number; key: string; value: unknown };

type Recipe =
  | { kind: 'valid'; seed: number; edits: number; extra: Extra }
  | { kind: 'mutated'; seed: number; edits: number; extra: Extra; mutations: Mutation[] }
  | { kind: 'resend' }
  | { kind: 'random'; event: string; payload: unknown; ack: boolean }
  | { kind: 'stepish'; version: number | null; steps: unknown[] }
  | { kind: 'sync'; event: 'join' | 'pull'; payload: unknown }
  | { kind: 'presence'; payload: unknown };

const json = fc.jsonValue({ maxDepth: 3 });
const stepTypeName = fc.oneof(
  fc.constantFrom(...stepTypes),
  fc.constantFrom('teleport', '__proto__', 'constructor', 'toString', ''),
  fc.string({ maxLength: 8 }),
);
const field = fc.constantFrom(...fields);
const index = fc.nat({ max: 10 });
const delta = fc.oneof(
  fc.integer({ min: -40, max: 40 }),
  fc.double({ min: -40, max: 40, noNaN: true }),
  fc.constantFrom(2 ** 53, -(2 ** 53), 1e300, 0.5, 1e9),
);
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), step: index, field, value: json }),
  fc.record({
    op: fc.constant('shift' as const),
    step: index,
    field: fc.constantFrom(...positionFields),
    delta,
  }),
  fc.record({ op: fc.constant('type' as const), step: index, type: stepTypeName }),
  fc.record({
    op: fc.constant('nest' as const),
    step: index,
    field,
    depth: fc.integer({ min: 1, max: 60 }),
    asObject: fc.boolean(),
  }),
  fc.record({ op: fc.constant('drop' as const), step: index, field }),
  fc.record({
    op: fc.constant('repeat' as const),
    step: index,
    times: fc.integer({ min: 1, max: 60 }),
  }),
  fc.record({ op: fc.constant('version' as const), delta: fc.integer({ min: -5, max: 5 }) }),
  fc.record({ op: fc.constant('link' as const), step: index, href: fc.constantFrom(...urls) }),
  fc.record({
    op: fc.constant('long' as const),
    step: index,
    field,
    length: fc.integer({ min: 1000, max: 12_000 }),
  }),
  fc.record({ op: fc.constant('binary' as const), step: index, field }),
  fc.record({
    op: fc.constant('proto' as const),
    step: index,
    key: fc.constantFrom('__proto__', 'constructor', 'prototype'),
    value: json,
  }),
);
const extra = fc.constantFrom<Extra>('none', 'none', 'image', 'attr', 'nodeMark', 'markSet');
const edit = {
  seed: fc.integer(),
  edits: fc.integer({ min: 1, max: 4 }),
  extra,
};
const intish = fc.oneof(
  fc.integer({ min: -2, max: 400 }),
  fc.double({ noNaN: true }),
  fc.constantFrom(2 ** 31, 2 ** 53, '1', null),
);
const stepish = fc.record(
  {
    stepType: stepTypeName,
    from: intish,
    to: intish,
    pos: intish,
    gapFrom: intish,
    gapTo: intish,
    insert: intish,
    slice: json,
    mark: fc.oneof(json, fc.record({ type: fc.constantFrom('strong', 'em', 'link', 'x') })),
    attr: fc.oneof(fc.constantFrom('level', 'src', 'href', '__proto__'), fc.string()),
    value: json,
    steps: fc.array(json, { maxLength: 3 }),
  },
  { requiredKeys: ['stepType'] },
);
const recipe: fc.Arbitrary<Recipe> = fc.oneof(
  { weight: 30, arbitrary: fc.record({ kind: fc.constant('valid' as const), ...edit }) },
  {
    weight: 35,
    arbitrary: fc.record({
      kind: fc.constant('mutated' as const),
      ...edit,
      mutations: fc.array(mutation, { minLength: 1, maxLength: 3 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('resend' as const) }) },
  {
    weight: 10,
    arbitrary: fc.record({
      kind: fc.constant('random' as const),
      event: fc
        .oneof(
          fc.constantFrom('steps', 'join', 'pull', 'presence', '__proto__', 'constructor'),
          fc.string({ maxLength: 20 }),
        )
        .filter((name) => !reserved.has(name)),
      payload: fc.jsonValue({ maxDepth: 6 }),
      ack: fc.boolean(),
    }),
  },
  {
    weight: 12,
    arbitrary: fc.record({
      kind: fc.constant('stepish' as const),
      version: fc.option(fc.integer({ min: -2, max: 5 })),
      steps: fc.array(stepish, { minLength: 1, maxLength: 5 }),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('sync' as const),
      event: fc.constantFrom('join' as const, 'pull' as const),
      payload: fc.oneof(
        fc.record({ version: intish, epoch: fc.oneof(fc.string(), json) }, { requiredKeys: [] }),
        json,
      ),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('presence' as const),
      payload: fc.record(
        {
          version: intish,
          anchor: intish,
          head: intish,
          name: fc.string({ maxLength: 70 }),
          color: fc.oneof(fc.constant('#aa00ff'), fc.string({ maxLength: 10 })),
        },
        { requiredKeys: [] },
      ),
    }),
  },
);

// ----- replicas and writers -----

/// A document rebuilt from the broadcasts one socket received, with every step's client id.
class Replica {
  doc: Node = schema.node('doc', null, [schema.node('paragraph')]);
  version = 0;
  readonly clientIDs: string[] = [];
  readonly problems: string[] = [];

  reset(doc: Node, version: number): void {
    this.doc = doc;
    this.version = version;
  }

  apply(message: StepsBroadcast): void {
    const base = message.version - message.steps.length;
    if (message.version <= this.version) return;
    if (base > this.version) {
      this.problems.push(`a gap in the broadcasts: at ${this.version}, got ${base}`);
      return;
    }
    for (let i = this.version - base; i < message.steps.length; i++) {
      try {
        const result = Step.fromJSON(schema, message.steps[i]).apply(this.doc);
        if (!result.doc) throw new Error(result.failed ?? 'failed');
        this.doc = result.doc;
      } catch (err) {
        this.problems.push(`broadcast step ${base + i} does not apply: ${(err as Error).message}`);
        return;
      }
      this.clientIDs[base + i] = message.clientIDs[i]!;
      this.version = base + i + 1;
    }
  }
}

interface Acked {
  clientID: string;
  version: number;
  count: number;
}

/// Counts of what the fuzzing sent and got.
const stats = {
  messages: 0,
  /// Messages not sent because the transport would close the connection: over 2 ×
  /// MAX_MESSAGE_BYTES, or more than 10 binary attachments (socket.io-parser's cap).
  skippedAtTransportCaps: 0,
  accepted: 0,
  answers: new Map<string, number>(),
  protocolErrors: new Map<string, number>(),
};

function count(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/// One socket that sends generated messages to one document and keeps a replica from the
/// broadcasts it receives (they arrive before its own acknowledgements).
class Writer {
  readonly socket: Socket;
  readonly replica = new Replica();
  readonly problems: string[] = [];
  lastValid: unknown[] | null = null;

  constructor(
    url: string,
    readonly docId: string,
    readonly clientID: string,
    private readonly acked: Acked[],
  ) {
    this.socket = rawSocket(url, docId, clientID);
    this.socket.on('steps', (message: StepsBroadcast) => this.replica.apply(message));
    this.socket.on('protocol-error', (error: { code: unknown; event: unknown }) => {
      count(stats.protocolErrors, String(error.code));
      if (!isErrorCode(error.code)) this.problems.push(`protocol-error code ${String(error.code)}`);
    });
    this.socket.on('closing', (notice: { code: string }) =>
      this.problems.push(`closing ${notice.code}`),
    );
    this.socket.on('disconnect', (reason: string) => this.problems.push(`disconnected: ${reason}`));
  }

  async join(): Promise<void> {
    const answer = await new Promise<{ ok: boolean; version: number; doc: unknown }>((resolve) =>
      this.socket.emit('join', {}, resolve),
    );
    assert.equal(answer.ok, true);
    this.replica.reset(Node.fromJSON(schema, answer.doc), answer.version);
  }

  /// Sends what `r` makes of the replica now; resolves once it is answered (or at once, for a
  /// message without an acknowledgement). Returns false when a property does not hold.
  async send(r: Recipe): Promise<boolean> {
    const message = this.materialize(r);
    if (!message) return true;
    if (JSON.stringify(message.args).length > maxSendBytes || buffers(message.args) > 10) {
      stats.skippedAtTransportCaps++;
      return true;
    }
    stats.messages++;
    if (!message.ack) {
      this.socket.emit(message.event, ...message.args);
      return true;
    }
    if (!answeredEvents.has(message.event)) {
      // Other events (unknown ones, presence) are answered by a protocol-error or not at all;
      // an acknowledgement, should one come, is still checked.
      this.socket.emit(message.event, ...message.args, (reply: unknown) => {
        this.check(message, reply);
      });
      return true;
    }
    const answer = await new Promise<unknown>((resolve) => {
      const timer = setTimeout(() => resolve('timeout'), 10_000);
      this.socket.emit(message.event, ...message.args, (reply: unknown) => {
        clearTimeout(timer);
        resolve(reply);
      });
    });
    return this.check(message, answer);
  }

  private check(message: Message, answer: unknown): boolean {
    const body = answer as {
      ok?: unknown;
      code?: unknown;
      retryable?: unknown;
      message?: unknown;
      version?: unknown;
    };
    const what = `${message.event} (${JSON.stringify(message.args).length} bytes as JSON, ${buffers(message.args)} buffers) ${JSON.stringify(message.args).slice(0, 300)} → ${JSON.stringify(answer)?.slice(0, 300)}`;
    if (body === null || typeof body !== 'object') {
      this.problems.push(`no answer: ${what}`);
      return false;
    }
    if (body.ok === true) {
      if (!Number.isSafeInteger(body.version)) {
        this.problems.push(`an answer without a version: ${what}`);
        return false;
      }
      count(stats.answers, 'ok');
      if (message.event === 'steps') {
        stats.accepted++;
        const steps = (message.args[0] as { steps: unknown[] }).steps;
        this.acked.push({
          clientID: this.clientID,
          version: body.version as number,
          count: steps.length,
        });
      }
      return true;
    }
    if (body.ok !== false || !isErrorCode(body.code)) {
      this.problems.push(`not an answer of the protocol: ${what}`);
      return false;
    }
    count(stats.answers, body.code);
    if (body.retryable !== errors[body.code].retryable || typeof body.message !== 'string') {
      this.problems.push(`retryable or message not as in the table: ${what}`);
      return false;
    }
    // `internal` means a handler threw; `unavailable` that a room closed (the memory store
    // never fails): both are bugs here.
    if (body.code === 'internal' || body.code === 'unavailable') {
      this.problems.push(`${body.code}: ${what}`);
      return false;
    }
    return true;
  }

  private materialize(r: Recipe): Message | null {
    const version = this.replica.version;
    switch (r.kind) {
      case 'valid': {
        const steps = validSteps(this.replica.doc, r.seed, r.edits, r.extra);
        if (steps.length === 0) return null;
        const args = [{ version, steps }];
        this.lastValid = args;
        return { event: 'steps', args, ack: true };
      }
      case 'mutated': {
        const steps = validSteps(this.replica.doc, r.seed, r.edits, r.extra) as unknown[];
        if (steps.length === 0) steps.push({ stepType: 'replace', from: 1, to: 1 });
        const payload = { version, steps };
        for (const m of r.mutations) mutate(payload, m);
        return { event: 'steps', args: [payload], ack: true };
      }
      case 'resend':
        return this.lastValid ? { event: 'steps', args: this.lastValid, ack: true } : null;
      case 'random':
        return { event: r.event, args: [r.payload], ack: r.ack };
      case 'stepish':
        return {
          event: 'steps',
          args: [{ version: r.version === null ? version : version + r.version, steps: r.steps }],
          ack: true,
        };
      case 'sync':
        return { event: r.event, args: [r.payload], ack: true };
      case 'presence':
        return { event: 'presence', args: [r.payload], ack: false };
    }
  }
}

/// Events the server always acknowledges when given a payload and a callback.
const answeredEvents = new Set(['steps', 'join', 'pull']);

interface Message {
  event: string;
  args: unknown[];
  ack: boolean;
}

/// Steps of up to `edits` real edits on `doc`, made by transactions as an editor makes them.
function validSteps(doc: Node, seed: number, edits: number, extra: Extra): StepJSON[] {
  const random = new Random(seed);
  let state = EditorState.create({ doc });
  const steps: StepJSON[] = [];
  for (let i = 0; i < edits; i++) {
    let tr: Transaction | null = null;
    try {
      tr =
        i === 0 && extra !== 'none' ? extraEdit(state, random, extra) : randomEdit(state, random);
    } catch {
      tr = null;
    }
    if (!tr || !tr.docChanged) continue;
    state = state.apply(tr);
    for (const step of tr.steps) steps.push(step.toJSON() as StepJSON);
  }
  return steps;
}

/// Edits `randomEdit` does not make: images, attribute steps, node marks, markSets.
function extraEdit(state: EditorState, random: Random, extra: Extra): Transaction | null {
  const tr = state.tr;
  const blocks: number[] = [];
  const images: number[] = [];
  const headings: number[] = [];
  state.doc.descendants((node, pos) => {
    if (node.isTextblock && !node.type.spec.code) blocks.push(pos);
    if (node.type.name === 'image') images.push(pos);
    if (node.type.name === 'heading') headings.push(pos);
    return true;
  });
  switch (extra) {
    case 'image': {
      if (blocks.length === 0) return null;
      const src = random.pick(['https://example.com/a.png', 'img/b.gif', urls[12]!]);
      return tr.insert(random.pick(blocks) + 1, schema.nodes.image!.create({ src, alt: 'a' }));
    }
    case 'attr':
      if (headings.length === 0) return null;
      return tr.setNodeAttribute(random.pick(headings), 'level', random.int(1, 6));
    case 'nodeMark': {
      if (images.length === 0) return null;
      const pos = random.pick(images);
      const em = schema.marks.em!.create();
      return random.chance(0.5) ? tr.addNodeMark(pos, em) : tr.removeNodeMark(pos, em);
    }
    case 'markSet': {
      const size = state.doc.content.size;
      if (size < 4) return null;
      const from = random.int(1, size - 2);
      const to = Math.min(size - 1, from + random.int(1, 10));
      const step = Step.fromJSON(schema, {
        stepType: 'markSet',
        steps: [
          { stepType: 'addMark', mark: { type: 'strong' }, from, to },
          { stepType: 'removeMark', mark: { type: 'em' }, from, to },
        ],
      });
      return tr.maybeStep(step).failed ? null : tr;
    }
    case 'none':
      return null;
  }
}

/// Applies one mutation to a `{version, steps}` payload, in place.
function mutate(payload: { version: unknown; steps: unknown[] }, m: Mutation): void {
  if (m.op === 'version') {
    payload.version = (payload.version as number) + m.delta;
    return;
  }
  const steps = payload.steps;
  const at = m.step % steps.length;
  const step = steps[at];
  if (m.op === 'repeat') {
    steps.splice(at, 0, ...Array.from({ length: m.times }, () => structuredClone(step)));
    return;
  }
  if (m.op === 'type') {
    if (isObject(step)) step['stepType'] = m.type;
    return;
  }
  if (m.op === 'link') {
    if (isObject(step)) step['mark'] = { type: 'link', attrs: { href: m.href } };
    return;
  }
  if (m.op === 'proto') {
    // An own key, as JSON.parse makes it (assignment would set the prototype).
    if (isObject(step))
      Object.defineProperty(step, m.key, {
        value: m.value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    return;
  }
  const path = m.field.split('.');
  let holder: unknown = step;
  for (let i = 0; i < path.length - 1; i++) {
    holder = isObject(holder) ? holder[path[i]!] : undefined;
  }
  if (!isObject(holder)) return;
  const key = path[path.length - 1]!;
  switch (m.op) {
    case 'set':
      holder[key] = m.value;
      break;
    case 'shift':
      if (typeof holder[key] === 'number') holder[key] = (holder[key] as number) + m.delta;
      break;
    case 'nest': {
      let value = holder[key];
      for (let i = 0; i < m.depth; i++) value = m.asObject ? { [key]: value } : [value];
      holder[key] = value;
      break;
    }
    case 'drop':
      delete holder[key];
      break;
    case 'long':
      holder[key] = 'x'.repeat(m.length);
      break;
    case 'binary':
      holder[key] = Buffer.from(JSON.stringify(holder[key] ?? null));
      break;
  }
}

/// How many binary values `value` holds (each is one attachment on the wire). A Buffer copied
/// by `structuredClone` is a plain Uint8Array, binary all the same.
function buffers(value: unknown): number {
  if (ArrayBuffer.isView(value)) return 1;
  if (typeof value !== 'object' || value === null) return 0;
  let found = 0;
  for (const item of Object.values(value)) found += buffers(item);
  return found;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    !ArrayBuffer.isView(value)
  );
}

// ----- the run -----

/// The server's VmRSS (from /proc) and its V8 heap in use (as the preload reports it) after a
/// full GC in it, in MB.
async function memoryAfterGc(server: ServerProcess): Promise<{ rss: number; heap: number }> {
  const reports = () => [...server.output().matchAll(/gc-done (\{.*\})\n/g)];
  const done = reports().length;
  server.child.kill('SIGUSR2');
  await waitFor(() => reports().length > done, 'a GC in the server');
  // Let the freed pages go back before reading RSS.
  await delay(200);
  const { heapUsed } = JSON.parse(reports().at(-1)![1]!) as { heapUsed: number };
  const status = await readFile(`/proc/${server.child.pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+) kB/m.exec(status);
  assert.ok(match, 'VmRSS in /proc/<pid>/status');
  return { rss: Number(match[1]) / 1024, heap: heapUsed / 1024 / 1024 };
}

describe('fuzzing a live server', () => {
  let server: ServerProcess;
  const writers: Writer[] = [];
  const observers: { docId: string; socket: Socket; replica: Replica; acked: Acked[] }[] = [];

  before(async () => {
    server = await startServerProcess(serverEnv);
  });
  after(async () => {
    for (const writer of writers) writer.socket.close();
    for (const observer of observers) observer.socket.close();
    await server.stop('SIGKILL');
  });

  it(`survives ${totalRuns} random, valid and mutated messages with every answer coded, every document equal to its replica, and RSS back near where it started`, async (t) => {
    t.diagnostic(`seed ${seed} (FUZZ_SEED=${seed} replays it)`);
    for (let d = 0; d < documents; d++) {
      const docId = `fuzz-${d}`;
      const acked: Acked[] = [];
      // The first writer makes the document (a reader cannot), sending nothing yet; the
      // read-only observer joins before any step, so that its replica sees every broadcast.
      const first = new Writer(server.url, docId, `fuzz-${d}-0`, acked);
      await first.join();
      writers.push(first);
      const socket = rawSocket(server.url, docId, { clientID: `observer-${d}`, readOnly: true });
      const replica = new Replica();
      socket.on('steps', (message: StepsBroadcast) => replica.apply(message));
      const joined = await new Promise<{ ok: boolean }>((resolve) =>
        socket.emit('join', {}, resolve),
      );
      assert.equal(joined.ok, true);
      observers.push({ docId, socket, replica, acked });
      for (let w = 1; w < writersPerDocument; w++) {
        const writer = new Writer(server.url, docId, `fuzz-${d}-${w}`, acked);
        await writer.join();
        writers.push(writer);
      }
    }
    const memoryBefore = await memoryAfterGc(server);

    const started = Date.now();
    const deadline = started + seconds * 1000;
    // Some runs send nothing (a resend with nothing to resend, an edit that does not fit, a
    // message over the transport's caps): a tenth more runs, and sending stops at totalRuns.
    const perWriter = Math.ceil((totalRuns * 1.1) / writers.length);
    const runs = await Promise.allSettled(
      writers.map((writer, i) =>
        fc.assert(
          fc.asyncProperty(recipe, async (r) => {
            if (stats.messages >= totalRuns) return;
            if (!(await writer.send(r))) throw new Error(writer.problems.at(-1));
          }),
          {
            numRuns: perWriter,
            seed: seed + i,
            endOnFailure: true,
            includeErrorInReport: true,
            interruptAfterTimeLimit: Math.max(1, deadline - Date.now()),
            markInterruptAsFailure: false,
          },
        ),
      ),
    );
    const elapsed = (Date.now() - started) / 1000;
    t.diagnostic(
      `${stats.messages} messages in ${elapsed.toFixed(1)} s (${stats.accepted} batches accepted, ${stats.skippedAtTransportCaps} skipped at the transport's caps)`,
    );
    t.diagnostic(`answers: ${JSON.stringify(Object.fromEntries(stats.answers))}`);
    t.diagnostic(`protocol errors: ${JSON.stringify(Object.fromEntries(stats.protocolErrors))}`);
    if (stats.messages < totalRuns && Date.now() >= deadline) {
      t.diagnostic(`stopped by FUZZ_SECONDS=${seconds} before ${totalRuns} messages`);
    }

    if (writers.some((writer) => writer.problems.length > 0)) {
      t.diagnostic(`server output (end):\n${server.output().slice(-3000)}`);
    }
    // Properties of the whole run (what broke first, then fast-check's counterexample).
    for (const writer of writers) {
      assert.deepEqual(writer.problems, [], `${writer.clientID}: no property broken`);
      assert.deepEqual(writer.replica.problems, [], `${writer.clientID}: its broadcasts apply`);
    }
    for (const run of runs) if (run.status === 'rejected') throw run.reason;
    assert.ok(
      stats.messages >= totalRuns || Date.now() >= deadline,
      `${stats.messages} messages sent, fewer than ${totalRuns}`,
    );
    assert.equal(server.child.exitCode, null, 'the server process is alive');
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    const logged = server
      .output()
      .split('\n')
      .filter(
        (line) => line.startsWith('{') && (JSON.parse(line) as { level: number }).level >= 50,
      );
    assert.deepEqual(logged, [], 'the server logged no error');
    assert.doesNotMatch(server.output(), /Unhandled|uncaught/i);
    assert.ok(stats.accepted > 100, 'enough valid batches went through to mean something');

    for (const { docId, replica, acked } of observers) {
      const served = await readServed(server.url, docId);
      await waitFor(() => replica.version === served.version, `${docId}: the observer catches up`);
      assert.deepEqual(replica.problems, [], `${docId}: every broadcast applies in order`);
      assert.deepEqual(
        JSON.parse(JSON.stringify(replica.doc.toJSON())),
        served.doc,
        `${docId}: the document equals the replica built from the broadcasts`,
      );
      // Every acknowledged batch is in the broadcasts, at its version, under its sender.
      let steps = 0;
      for (const batch of acked) {
        for (let v = batch.version - batch.count; v < batch.version; v++) {
          assert.equal(
            replica.clientIDs[v],
            batch.clientID,
            `${docId}: step ${v} is ${batch.clientID}'s`,
          );
        }
        steps += batch.count;
      }
      assert.equal(
        steps,
        served.version,
        `${docId}: every step served was acknowledged to someone`,
      );
      for (const writer of writers.filter((w) => w.docId === docId)) {
        assert.ok(writer.replica.doc.eq(replica.doc), `${writer.clientID}'s replica agrees`);
      }
    }

    // RSS is what the operator sees; the heap, which V8 does not hold on to as it does pages,
    // is the sharper sign of a leak.
    const memoryAfter = await memoryAfterGc(server);
    const mb = (value: number) => `${value.toFixed(0)} MB`;
    t.diagnostic(
      `server after GC: RSS ${mb(memoryBefore.rss)} → ${mb(memoryAfter.rss)}, heap ${mb(memoryBefore.heap)} → ${mb(memoryAfter.heap)}`,
    );
    assert.ok(
      memoryAfter.rss <= memoryBefore.rss + rssSlackMB,
      `RSS grew from ${mb(memoryBefore.rss)} to ${mb(memoryAfter.rss)} (allowed ${rssSlackMB} MB)`,
    );
    assert.ok(
      memoryAfter.heap <= memoryBefore.heap + heapSlackMB,
      `the heap grew from ${mb(memoryBefore.heap)} to ${mb(memoryAfter.heap)} (allowed ${heapSlackMB} MB)`,
    );
  });
});
