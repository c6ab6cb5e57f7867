import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { get as httpGet } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Node } from 'prosemirror-model';
import { Transform } from 'prosemirror-transform';
import type { Socket } from 'socket.io-client';
import type { CollabClient } from '../../../client/index.js';
import { errors, isErrorCode, type ErrorCode } from '../../../schema/errors.js';
import { schema } from '../../../schema/index.js';
import { type StepJSON } from '../../../schema/events.js';
import { defaults, type Config } from '../../../server/config.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { openEditor } from '../../support/editors.js';
import {
  assertCoded,
  deepJson,
  deepText,
  RawJson,
  rawWith,
  firstTextPos,
  noAdmissionLimits,
  jsonWithOwnKeys,
  readServed,
  wrapSteps,
  type Served,
} from '../../support/hostile.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { waitFor } from '../../support/wait.js';

// The hostile corpus: every event and every step type, with the attacks of the hostile-input
// issue. Each case states the code it must be answered with; after each, the document's
// version and content must be what they were (or, for the few cases that are accepted, what the
// accepted steps made of it), and an honest editor on the real client library must still edit
// and be acknowledged. Most cases run against small limits, to stay fast; the attacks that
// crashed the server (nested wraps, deep attribute values, huge images, big batches on a big
// document) also run at the default limits.

/// Limits small enough that crossing each costs a few kilobytes.
const small: Partial<Config> = {
  ...noAdmissionLimits,
  maxStepsPerBatch: 50,
  maxDocSize: 20_000,
  maxDocBytes: 48 * 1024,
  maxDocDepth: 8,
  maxJsonDepth: 32,
  maxAttributeBytes: 1024,
  maxMessageBytes: 64 * 1024,
};

/// What the document looks like when a case's message is built.
interface Ctx {
  doc: Node;
  version: number;
}

/// What a case must get: a refusal code through its acknowledgement, `accepted` (a batch
/// applied), `answered` (a join or pull answered), a `protocol-error` event with a code (for
/// messages without an acknowledgement), `relayed` (a presence reaching the others), or
/// `disconnected` (the transport's hard cap closed the connection).
type Expect =
  ErrorCode | 'accepted' | 'answered' | `protocol-error:${ErrorCode}` | 'relayed' | 'disconnected';

interface MessageCase {
  name: string;
  /// Default `steps`.
  event?: string | number;
  args: (ctx: Ctx) => unknown[];
  /// False: sent without an acknowledgement callback.
  ack?: boolean;
  /// Who sends it: the joined attacker (default), a socket that never joined, or a read-only one.
  from?: 'attacker' | 'unjoined' | 'readonly';
  expect: Expect;
  /// For accepted batches: more checks on the served document.
  check?: (served: Served) => void;
}

interface HandshakeCase {
  name: string;
  /// The query as an object, or a raw query string (sent with the polling transport, so that
  /// repeated keys reach the server as they are).
  query: Record<string, string> | string;
  auth: unknown;
  expect: ErrorCode | 'connected';
  /// For a polling handshake that connects: join, then check that `doc` exists and `not` does not.
  binds?: { doc: string; not: string };
  /// For a refusal whose message says more than the table's: a pattern it matches.
  message?: RegExp;
}

// ----- building messages against the current document -----

function p(text: string): Node {
  return schema.node('paragraph', null, text ? [schema.text(text)] : []);
}

/// The document the corpus starts from: a paragraph, a heading, an image, a blockquote, an
/// ordered list and a code block, so that every step type has something to aim at.
const seed = schema.node('doc', null, [
  p('hello world'),
  schema.node('heading', { level: 2 }, [schema.text('Title')]),
  schema.node('paragraph', null, [
    schema.text('see '),
    schema.node('image', { src: 'https://example.com/a.png', alt: 'a' }),
    schema.text(' here'),
  ]),
  schema.node('blockquote', null, [p('quoted')]),
  schema.node('ordered_list', null, [schema.node('list_item', null, [p('item')])]),
  schema.node('code_block', null, [schema.text('code')]),
]);

/// Position of the first node of type `name`.
function nodePos(doc: Node, name: string): number {
  let found = -1;
  doc.descendants((node, pos) => {
    if (found >= 0) return false;
    if (node.type.name === name) found = pos;
    return found < 0;
  });
  assert.ok(found >= 0, `the document has a ${name}`);
  return found;
}

/// The range of the first occurrence of `word` in a text node.
function wordRange(doc: Node, word: string): { from: number; to: number } {
  let range: { from: number; to: number } | null = null;
  doc.descendants((node, pos) => {
    if (range) return false;
    if (node.isText) {
      const at = node.text!.indexOf(word);
      if (at >= 0) range = { from: pos + at, to: pos + at + word.length };
    }
    return !range;
  });
  assert.ok(range, `the document has "${word}"`);
  return range;
}

function text(value: string, marks?: unknown[]): Record<string, unknown> {
  return marks ? { type: 'text', text: value, marks } : { type: 'text', text: value };
}

/// A replace step inserting `content` (JSON nodes) at the start of the first paragraph.
function insertInline(ctx: Ctx, ...content: unknown[]): StepJSON {
  const at = firstTextPos(ctx.doc);
  return { stepType: 'replace', from: at, to: at, slice: { content } };
}

/// A replace step inserting `content` (JSON blocks) at the top level, before the first block.
function insertBlocks(...content: unknown[]): StepJSON {
  return { stepType: 'replace', from: 0, to: 0, slice: { content } };
}

function batch(ctx: Ctx, ...steps: unknown[]): unknown[] {
  return [{ version: ctx.version, steps }];
}

function image(src: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { type: 'image', attrs: { src, ...extra } };
}

function link(href: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { type: 'link', attrs: { href, ...extra } };
}

/// One valid step of each type, made against the current document. Sent as they are, each is
/// accepted (the first cases check that), so a mutated one refused proves the mutation counts.
const templates = {
  replace: (ctx: Ctx): StepJSON => insertInline(ctx, text('x')),
  replaceAround: (ctx: Ctx): StepJSON => wrapSteps(ctx.doc, 1)[0]!,
  addMark: (ctx: Ctx): StepJSON => ({
    stepType: 'addMark',
    mark: { type: 'strong' },
    ...wordRange(ctx.doc, 'world'),
  }),
  removeMark: (ctx: Ctx): StepJSON => ({
    stepType: 'removeMark',
    mark: { type: 'strong' },
    ...wordRange(ctx.doc, 'world'),
  }),
  markSet: (ctx: Ctx): StepJSON => ({ stepType: 'markSet', steps: [templates.addMark(ctx)] }),
  addNodeMark: (ctx: Ctx): StepJSON => ({
    stepType: 'addNodeMark',
    pos: nodePos(ctx.doc, 'image'),
    mark: { type: 'em' },
  }),
  removeNodeMark: (ctx: Ctx): StepJSON => ({
    stepType: 'removeNodeMark',
    pos: nodePos(ctx.doc, 'image'),
    mark: { type: 'em' },
  }),
  attr: (ctx: Ctx): StepJSON => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'heading'),
    attr: 'level',
    value: 3,
  }),
};

type StepTemplate = keyof typeof templates;

/// `template`'s step with `changes` merged in (into its inner step for a markSet).
function mutated(template: StepTemplate, changes: Record<string, unknown>) {
  return (ctx: Ctx): StepJSON => {
    const step = templates[template](ctx);
    if (template === 'markSet') {
      const inner = (step['steps'] as StepJSON[])[0]!;
      return { ...step, steps: [{ ...inner, ...changes }] };
    }
    return { ...step, ...changes };
  };
}

function stepCase(
  name: string,
  expect: Expect,
  steps: (ctx: Ctx) => unknown[] | unknown,
  check?: (served: Served) => void,
): MessageCase {
  return {
    name,
    args: (ctx) => {
      const made = steps(ctx);
      return batch(ctx, ...(Array.isArray(made) ? made : [made]));
    },
    expect,
    ...(check ? { check } : {}),
  };
}

/// A case whose step holds the JSON text `deep` where it says `'<<deep>>'`: for values nested
/// too deep for the client library to encode.
function deepStepCase(
  name: string,
  expect: Expect,
  step: (ctx: Ctx) => unknown,
  deep: string,
): MessageCase {
  return {
    name,
    expect,
    args: (ctx) => [rawWith({ version: ctx.version, steps: [step(ctx)] }, { deep })],
  };
}

// ----- the corpus -----

const validPresence = { version: 0, anchor: 1, head: 1, name: 'Eve', color: '#aa00ff' };

const handshakeCases: HandshakeCase[] = [
  { name: 'no document id', query: {}, auth: { clientID: 'h' }, expect: 'bad-document-id' },
  {
    name: 'empty document id',
    query: { doc: '' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id .',
    query: { doc: '.' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id ..',
    query: { doc: '..' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    // Engine.IO keeps the last of repeated query keys; the server refuses the ambiguity
    // rather than open a document a proxy routing on the first value did not mean.
    name: '?doc=A&doc=B is refused',
    query: 'doc=dupA&doc=dupB',
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
    message: /named once/,
  },
  {
    // nginx's $arg_doc is the first key named doc in any letter case: a gateway would route
    // by the other one.
    name: '?DOC=A&doc=B is refused',
    query: 'DOC=dupA&doc=dupB',
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
    message: /named once/,
  },
  {
    // A gateway decodes only %3A (':'): it would hash this as another document.
    name: '?doc= with an escape other than %3A is refused',
    query: 'doc=esc%61ped',
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
    message: /no escapes but ':'/,
  },
  {
    name: '?doc=.. by polling',
    query: 'doc=..',
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id of 129 characters',
    query: { doc: 'd'.repeat(129) },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id with a slash',
    query: { doc: '../../etc/passwd' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id with a hash tag',
    query: { doc: 'a}{b' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id in another script',
    query: { doc: 'документ' },
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  {
    name: 'document id __proto__ by polling',
    query: '__proto__=x&doc[]=y',
    auth: { clientID: 'h' },
    expect: 'bad-document-id',
  },
  { name: 'no auth', query: { doc: 'ok' }, auth: {}, expect: 'bad-client-id' },
  {
    name: 'numeric client id',
    query: { doc: 'ok' },
    auth: { clientID: 42 },
    expect: 'bad-client-id',
  },
  {
    name: 'client id of 65 characters',
    query: { doc: 'ok' },
    auth: { clientID: 'c'.repeat(65) },
    expect: 'bad-client-id',
  },
  {
    name: 'client id as an object',
    query: { doc: 'ok' },
    auth: { clientID: { toString: 'x' } },
    expect: 'bad-client-id',
  },
  {
    name: 'client id with a space',
    query: { doc: 'ok' },
    auth: { clientID: 'a b' },
    expect: 'bad-client-id',
  },
  {
    name: 'client id in a __proto__ key only',
    query: 'doc=ok',
    auth: jsonWithOwnKeys('{"__proto__":{"clientID":"x"}}'),
    expect: 'bad-client-id',
  },
  {
    name: 'readOnly as a string',
    query: { doc: 'ok' },
    auth: { clientID: 'h', readOnly: 'yes' },
    expect: 'bad-request',
  },
  {
    name: 'readOnly as 1',
    query: { doc: 'ok' },
    auth: { clientID: 'h', readOnly: 1 },
    expect: 'bad-request',
  },
  {
    name: 'auth nested 5,000 deep beside a valid client id',
    query: 'doc=ok',
    auth: new RawJson(`{"clientID":"h","extra":${deepText(5000)}}`),
    expect: 'connected',
  },
];

const messageCases: MessageCase[] = [
  // Every template, sent as it is, is accepted: the mutations below are refused for the
  // mutation, not for a broken template.
  ...(Object.keys(templates) as StepTemplate[]).map((name) =>
    stepCase(`a valid ${name} step is accepted`, 'accepted', templates[name]),
  ),

  // ----- join -----
  {
    name: 'join with a payload nested 40 deep',
    event: 'join',
    args: () => [deepJson(40)],
    expect: 'too-deep',
  },
  {
    name: 'join with a payload nested 5,000 deep',
    event: 'join',
    args: () => [new RawJson(deepText(5000, '1', 'version'))],
    expect: 'too-deep',
  },
  {
    name: 'join with a binary payload',
    event: 'join',
    args: () => [Buffer.from('{"version":0}')],
    expect: 'bad-request',
  },
  {
    name: 'join with a binary field',
    event: 'join',
    args: () => [{ version: 0, epoch: Buffer.alloc(8) }],
    expect: 'bad-request',
  },
  { name: 'join with a string payload', event: 'join', args: () => ['{}'], expect: 'bad-request' },
  { name: 'join with a number payload', event: 'join', args: () => [7], expect: 'bad-request' },
  {
    name: 'join with an array payload',
    event: 'join',
    args: () => [[{ version: 0 }]],
    expect: 'bad-request',
  },
  {
    name: 'join with version -1',
    event: 'join',
    args: () => [{ version: -1 }],
    expect: 'bad-request',
  },
  {
    name: 'join with version 1.5',
    event: 'join',
    args: () => [{ version: 1.5 }],
    expect: 'bad-request',
  },
  {
    name: 'join with version "1"',
    event: 'join',
    args: () => [{ version: '1' }],
    expect: 'bad-request',
  },
  {
    name: 'join with version 2^53',
    event: 'join',
    args: () => [{ version: 2 ** 53 }],
    expect: 'bad-request',
  },
  {
    name: 'join with an epoch of 65 characters',
    event: 'join',
    args: () => [{ epoch: 'e'.repeat(65) }],
    expect: 'bad-request',
  },
  {
    name: 'join with an epoch over the string limit',
    event: 'join',
    args: () => [{ epoch: 'e'.repeat(2000) }],
    expect: 'too-large',
  },
  {
    name: 'join with an object epoch',
    event: 'join',
    args: () => [{ epoch: { $gt: '' } }],
    expect: 'bad-request',
  },
  {
    name: 'join with a __proto__ key',
    event: 'join',
    args: () => [jsonWithOwnKeys('{"__proto__":{"version":-1}}')],
    expect: 'answered',
  },
  {
    name: 'join with a constructor.prototype key',
    event: 'join',
    args: () => [jsonWithOwnKeys('{"constructor":{"prototype":{"ok":false}}}')],
    expect: 'answered',
  },
  {
    name: 'join at a version far ahead',
    event: 'join',
    args: () => [{ version: 1_000_000 }],
    expect: 'answered',
  },
  {
    name: 'join with an extra argument nested 40 deep',
    event: 'join',
    args: () => [{}, deepJson(40)],
    expect: 'too-deep',
  },
  {
    name: 'join without an acknowledgement',
    event: 'join',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    // Answered through the acknowledgement it has: the client must not wait for ever.
    name: 'join with nothing but an acknowledgement',
    event: 'join',
    args: () => [],
    expect: 'bad-request',
  },
  {
    name: 'join nested 40 deep without an acknowledgement',
    event: 'join',
    ack: false,
    args: () => [deepJson(40)],
    expect: 'protocol-error:too-deep',
  },

  // ----- pull -----
  {
    name: 'pull before join',
    event: 'pull',
    from: 'unjoined',
    args: () => [{}],
    expect: 'bad-request',
  },
  {
    name: 'pull nested 40 deep',
    event: 'pull',
    args: () => [deepJson(40, 0, 'version')],
    expect: 'too-deep',
  },
  {
    name: 'pull with a binary payload',
    event: 'pull',
    args: () => [new Uint8Array([1, 2, 3])],
    expect: 'bad-request',
  },
  {
    name: 'pull with version "x"',
    event: 'pull',
    args: () => [{ version: 'x' }],
    expect: 'bad-request',
  },
  {
    name: 'pull with version 2^53',
    event: 'pull',
    args: () => [{ version: 2 ** 53 }],
    expect: 'bad-request',
  },
  {
    name: 'pull with version null',
    event: 'pull',
    args: () => [{ version: null }],
    expect: 'bad-request',
  },
  {
    name: 'pull with another epoch',
    event: 'pull',
    args: (ctx) => [{ version: ctx.version, epoch: 'other' }],
    expect: 'answered',
  },
  {
    name: 'pull without an acknowledgement',
    event: 'pull',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'pull with a payload over the message limit',
    event: 'pull',
    args: () => [
      {
        pad: 'x'
          .repeat(900)
          .split('')
          .map(() => 'y'.repeat(80)),
      },
    ],
    expect: 'too-large',
  },

  // ----- the steps envelope -----
  {
    name: 'steps before join',
    from: 'unjoined',
    args: (ctx) => batch(ctx, templates.replace(ctx)),
    expect: 'bad-request',
  },
  {
    name: 'steps from a read-only socket',
    from: 'readonly',
    args: (ctx) => batch(ctx, templates.replace(ctx)),
    expect: 'forbidden',
  },
  { name: 'steps with a string payload', args: () => ['{"version":0}'], expect: 'bad-request' },
  { name: 'steps with a null payload', args: () => [null], expect: 'bad-request' },
  {
    name: 'steps with an array payload',
    args: (ctx) => [[ctx.version, [templates.replace(ctx)]]],
    expect: 'bad-request',
  },
  {
    name: 'steps without a version',
    args: (ctx) => [{ steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version -1',
    args: (ctx) => [{ version: -1, steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version 0.5',
    args: (ctx) => [{ version: 0.5, steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version "0"',
    args: (ctx) => [{ version: String(ctx.version), steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version null',
    args: (ctx) => [{ version: null, steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version 2^53',
    args: (ctx) => [{ version: 2 ** 53, steps: [templates.replace(ctx)] }],
    expect: 'bad-request',
  },
  {
    name: 'steps with version only in __proto__',
    args: (ctx) => [
      jsonWithOwnKeys(
        `{"__proto__":{"version":${ctx.version}},"steps":[{"stepType":"replace","from":1,"to":1}]}`,
      ),
    ],
    expect: 'bad-request',
  },
  {
    name: 'steps that are not an array',
    args: (ctx) => [{ version: ctx.version, steps: templates.replace(ctx) }],
    expect: 'bad-request',
  },
  {
    name: 'steps as an array-like object',
    args: (ctx) => [{ version: ctx.version, steps: { 0: templates.replace(ctx), length: 1 } }],
    expect: 'bad-request',
  },
  {
    name: 'an empty batch',
    args: (ctx) => [{ version: ctx.version, steps: [] }],
    expect: 'bad-request',
  },
  { name: 'a step that is a number', args: (ctx) => batch(ctx, 42), expect: 'invalid-step' },
  { name: 'a step that is null', args: (ctx) => batch(ctx, null), expect: 'invalid-step' },
  {
    name: 'a step that is an array',
    args: (ctx) => batch(ctx, ['replace', 1, 1]),
    expect: 'invalid-step',
  },
  {
    name: 'a step that is a string',
    args: (ctx) => batch(ctx, '{"stepType":"replace"}'),
    expect: 'invalid-step',
  },
  {
    name: 'a version ahead of the server',
    args: (ctx) => [{ version: ctx.version + 5, steps: [templates.replace(ctx)] }],
    expect: 'history-gone',
  },
  {
    name: 'a batch one step over maxStepsPerBatch',
    args: (ctx) => [
      { version: ctx.version, steps: Array.from({ length: 51 }, () => templates.replace(ctx)) },
    ],
    expect: 'too-large',
  },
  {
    name: 'a message over maxMessageBytes',
    args: (ctx) => batch(ctx, insertInline(ctx, text('m'.repeat(70 * 1024)))),
    expect: 'too-large',
  },
  {
    name: 'a message over the transport cap (2 × maxMessageBytes)',
    args: (ctx) => batch(ctx, insertInline(ctx, text('m'.repeat(200 * 1024)))),
    expect: 'disconnected',
  },
  {
    // socket.io-parser's cap (maxAttachments 10): the server closes the connection.
    name: 'steps with 11 binary attachments',
    args: (ctx) => batch(ctx, ...Array.from({ length: 11 }, () => Buffer.from('x'))),
    expect: 'disconnected',
  },
  { name: 'steps nested 40 deep', args: () => [deepJson(40, 0, 'steps')], expect: 'too-deep' },
  {
    name: 'steps nested 5,000 deep',
    args: (ctx) => [
      rawWith({ version: ctx.version, steps: ['<<deep>>'] }, { deep: deepText(5000) }),
    ],
    expect: 'too-deep',
  },
  {
    name: 'steps with a binary step',
    args: (ctx) => batch(ctx, Buffer.from(JSON.stringify(templates.replace(ctx)))),
    expect: 'bad-request',
  },
  {
    name: 'steps with a binary text',
    args: (ctx) => batch(ctx, insertInline(ctx, { type: 'text', text: Buffer.from('x') })),
    expect: 'bad-request',
  },
  {
    name: 'steps with an extra argument nested 40 deep',
    args: (ctx) => [...batch(ctx, templates.replace(ctx)), deepJson(40)],
    expect: 'too-deep',
  },
  {
    name: 'steps without an acknowledgement',
    ack: false,
    args: (ctx) => batch(ctx, templates.replace(ctx)),
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'steps nested 40 deep without an acknowledgement',
    ack: false,
    args: () => [deepJson(40)],
    expect: 'protocol-error:too-deep',
  },
  {
    name: 'steps with a binary payload without an acknowledgement',
    ack: false,
    args: () => [Buffer.alloc(16)],
    expect: 'protocol-error:bad-request',
  },

  // ----- presence -----
  {
    name: 'presence before join',
    event: 'presence',
    from: 'unjoined',
    ack: false,
    args: () => [validPresence],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'a valid presence',
    event: 'presence',
    ack: false,
    args: () => [validPresence],
    expect: 'relayed',
  },
  {
    name: 'presence with an own __proto__ key',
    event: 'presence',
    ack: false,
    args: () => [
      { ...validPresence, ...(jsonWithOwnKeys('{"__proto__":{"admin":true}}') as object) },
    ],
    expect: 'relayed',
  },
  {
    name: 'presence nested 40 deep',
    event: 'presence',
    ack: false,
    args: () => [deepJson(40, validPresence, 'name')],
    expect: 'protocol-error:too-deep',
  },
  {
    name: 'presence nested 5,000 deep',
    event: 'presence',
    ack: false,
    args: () => [new RawJson(deepText(5000))],
    expect: 'protocol-error:too-deep',
  },
  {
    name: 'presence with a binary payload',
    event: 'presence',
    ack: false,
    args: () => [Buffer.from('{}')],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with a CSS-injecting colour',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, color: 'red;background:url(javascript:alert(1))' }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with a name of 65 characters',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, name: 'n'.repeat(65) }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with an empty name',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, name: '' }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with a name over the string limit',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, name: 'n'.repeat(5000) }],
    expect: 'protocol-error:too-large',
  },
  {
    name: 'presence with anchor -1',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, anchor: -1 }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with head 1.5',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, head: 1.5 }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence with version 2^31',
    event: 'presence',
    ack: false,
    args: () => [{ ...validPresence, version: 2 ** 31 }],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'presence as a string',
    event: 'presence',
    ack: false,
    args: () => ['here'],
    expect: 'protocol-error:bad-request',
  },

  // ----- unknown events and event names -----
  {
    name: 'an unknown event',
    event: 'delete-everything',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an unknown event with an acknowledgement',
    event: 'admin',
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event named __proto__',
    event: '__proto__',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event named constructor',
    event: 'constructor',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event named hasOwnProperty',
    event: 'hasOwnProperty',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event named "steps " (trailing space)',
    event: 'steps ',
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'a numeric event name',
    event: 42,
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event name of 200 characters',
    event: 'e'.repeat(200),
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:bad-request',
  },
  {
    name: 'an event name over the string limit',
    event: 'E'.repeat(5000),
    ack: false,
    args: () => [{}],
    expect: 'protocol-error:too-large',
  },
  {
    name: 'an unknown event nested 5,000 deep',
    event: 'x',
    ack: false,
    args: () => [new RawJson(deepText(5000))],
    expect: 'protocol-error:too-deep',
  },

  // ----- step types -----
  ...(
    ['teleport', '__proto__', 'constructor', 'toString', 'hasOwnProperty', '', 'Replace'] as const
  ).map((type) =>
    stepCase(`step type "${type}"`, 'invalid-step', (ctx) => ({
      ...templates.replace(ctx),
      stepType: type,
    })),
  ),
  stepCase('no step type', 'invalid-step', (ctx) => {
    const step: Record<string, unknown> = { ...templates.replace(ctx) };
    delete step['stepType'];
    return step;
  }),
  stepCase('a numeric step type', 'invalid-step', (ctx) => ({
    ...templates.replace(ctx),
    stepType: 1,
  })),
  // prosemirror-transform looks the type up as a property key, so ['replace'] is "replace";
  // harmless, since what is stored and broadcast is the parsed step's own JSON.
  stepCase(
    'a step type in an array is read as its one element',
    'accepted',
    (ctx) => ({ ...templates.replace(ctx), stepType: ['replace'] }),
    (served) => assert.ok(!JSON.stringify(served.doc).includes('["replace"]')),
  ),
  stepCase('a step type only in __proto__', 'invalid-step', () =>
    jsonWithOwnKeys('{"__proto__":{"stepType":"replace"},"from":1,"to":1}'),
  ),

  // ----- replace -----
  stepCase('replace with from > to (doubles the document)', 'invalid-step', (ctx) => ({
    stepType: 'replace',
    from: ctx.doc.content.size,
    to: 0,
  })),
  stepCase('replace with from > to and a slice', 'invalid-step', (ctx) => ({
    ...insertInline(ctx, text('d')),
    from: 5,
    to: 2,
  })),
  stepCase('replace inserting loose text at the top level', 'invalid-step', () =>
    insertBlocks(text('loose')),
  ),
  stepCase('replace inserting an unknown node type', 'invalid-step', (ctx) =>
    insertInline(ctx, { type: 'script', content: [text('alert(1)')] }),
  ),
  stepCase('replace inserting a __proto__ node', 'invalid-step', () =>
    insertBlocks({ type: '__proto__' }),
  ),
  stepCase('replace inserting a constructor node', 'invalid-step', () =>
    insertBlocks({ type: 'constructor' }),
  ),
  stepCase('replace inserting a mark of type constructor', 'invalid-step', (ctx) =>
    insertInline(ctx, text('c', [{ type: 'constructor' }])),
  ),
  stepCase('replace inserting an unknown mark', 'invalid-step', (ctx) =>
    insertInline(ctx, text('c', [{ type: 'blink' }])),
  ),
  stepCase('replace inserting an empty text node', 'invalid-step', (ctx) =>
    insertInline(ctx, text('')),
  ),
  stepCase('replace inserting a numeric text', 'invalid-step', (ctx) =>
    insertInline(ctx, { type: 'text', text: 5 }),
  ),
  stepCase('replace with content that is not an array', 'invalid-step', (ctx) => ({
    ...insertInline(ctx),
    slice: { content: { type: 'text', text: 'x' } },
  })),
  stepCase('replace with marks that are not an array', 'invalid-step', (ctx) =>
    insertInline(ctx, { type: 'text', text: 'x', marks: { type: 'em' } }),
  ),
  stepCase('replace with openStart -1', 'invalid-step', (ctx) => ({
    ...insertInline(ctx, text('x')),
    slice: { content: [text('x')], openStart: -1 },
  })),
  stepCase('replace with openStart 0.5', 'invalid-step', (ctx) => ({
    ...insertInline(ctx, text('x')),
    slice: { content: [text('x')], openStart: 0.5 },
  })),
  stepCase('replace with openStart "1"', 'invalid-step', (ctx) => ({
    ...insertInline(ctx, text('x')),
    slice: { content: [text('x')], openStart: '1' },
  })),
  stepCase('replace with openEnd 99', 'invalid-step', (ctx) => ({
    ...insertInline(ctx, text('x')),
    slice: { content: [text('x')], openEnd: 99 },
  })),
  stepCase('replace with an empty slice that says it is open', 'invalid-step', (ctx) => ({
    ...insertInline(ctx),
    slice: { content: [], openStart: 1 },
  })),
  stepCase('replace with only an openEnd', 'invalid-step', (ctx) => ({
    ...insertInline(ctx),
    slice: { openEnd: 2 },
  })),
  stepCase('replaceAround with an empty slice that says it is open', 'invalid-step', (ctx) => ({
    ...templates.replaceAround(ctx),
    slice: { content: [], openStart: 1 },
  })),
  stepCase('replace inserting a paragraph inside a paragraph', 'invalid-step', (ctx) =>
    insertInline(ctx, { type: 'paragraph', content: [text('p')] }),
  ),
  stepCase('replace inserting 10 nested blockquotes (deeper than maxDocDepth)', 'too-deep', () => {
    let node: unknown = { type: 'paragraph', content: [text('deep')] };
    for (let i = 0; i < 10; i++) node = { type: 'blockquote', content: [node] };
    return insertBlocks(node);
  }),
  stepCase('replace inserting a text of 25,000 characters (over maxDocSize)', 'too-large', (ctx) =>
    insertInline(ctx, text('s'.repeat(25_000))),
  ),
  stepCase(
    'ten inserts of 6,000 characters in one message (over maxDocBytes)',
    'too-large',
    (ctx) => Array.from({ length: 10 }, () => insertInline(ctx, text('b'.repeat(6000)))),
  ),
  stepCase('a valid step, then one that does not apply', 'invalid-step', (ctx) => [
    templates.replace(ctx),
    { stepType: 'replace', from: 1e6, to: 1e6 + 1 },
  ]),
  stepCase('a valid step, then an unknown one', 'invalid-step', (ctx) => [
    templates.replace(ctx),
    { stepType: 'teleport' },
  ]),
  stepCase('nine real wraps in one batch (deeper than maxDocDepth)', 'too-deep', (ctx) =>
    wrapSteps(ctx.doc, 9),
  ),

  // ----- replaceAround -----
  stepCase('replaceAround with the gap before from', 'invalid-step', (ctx) => {
    const step = templates.replaceAround(ctx);
    return { ...step, gapFrom: (step['from'] as number) - 1 };
  }),
  stepCase('replaceAround with the gap after to', 'invalid-step', (ctx) => {
    const step = templates.replaceAround(ctx);
    return { ...step, gapTo: (step['to'] as number) + 1 };
  }),
  stepCase('replaceAround with gapFrom > gapTo', 'invalid-step', (ctx) => {
    const step = templates.replaceAround(ctx);
    return { ...step, gapFrom: step['gapTo'], gapTo: step['gapFrom'] };
  }),
  stepCase('replaceAround inserting past its slice', 'invalid-step', (ctx) => ({
    ...templates.replaceAround(ctx),
    insert: 50,
  })),
  stepCase('replaceAround wrapping in an unknown node', 'invalid-step', (ctx) => ({
    ...templates.replaceAround(ctx),
    slice: { content: [{ type: 'marquee' }] },
  })),
  stepCase('replaceAround wrapping in a heading', 'invalid-step', (ctx) => ({
    ...templates.replaceAround(ctx),
    slice: { content: [{ type: 'heading', attrs: { level: 1 } }] },
  })),

  // ----- addMark, removeMark, markSet -----
  stepCase(
    'addMark of an unknown mark',
    'invalid-step',
    mutated('addMark', { mark: { type: 'script' } }),
  ),
  stepCase(
    'addMark of a __proto__ mark',
    'invalid-step',
    mutated('addMark', { mark: { type: '__proto__' } }),
  ),
  stepCase('addMark without a mark', 'invalid-step', mutated('addMark', { mark: null })),
  stepCase('addMark over the whole document', 'accepted', (ctx) => ({
    stepType: 'addMark',
    mark: { type: 'em' },
    from: 0,
    to: ctx.doc.content.size,
  })),
  stepCase(
    'removeMark of an unknown mark',
    'invalid-step',
    mutated('removeMark', { mark: { type: 'script' } }),
  ),
  stepCase('markSet whose steps are not an array', 'invalid-step', (ctx) => ({
    stepType: 'markSet',
    steps: templates.addMark(ctx),
  })),
  stepCase('markSet holding a replace step', 'invalid-step', (ctx) => ({
    stepType: 'markSet',
    steps: [templates.replace(ctx)],
  })),
  stepCase('markSet holding a markSet', 'invalid-step', (ctx) => ({
    stepType: 'markSet',
    steps: [templates.markSet(ctx)],
  })),
  stepCase('markSet holding an unknown step', 'invalid-step', () => ({
    stepType: 'markSet',
    steps: [{ stepType: 'teleport' }],
  })),
  stepCase('markSet carrying more mark steps than maxStepsPerBatch', 'too-large', (ctx) => ({
    stepType: 'markSet',
    steps: Array.from({ length: 51 }, (_, i) => ({
      ...templates.addMark(ctx),
      mark: { type: i % 2 ? 'em' : 'strong' },
    })),
  })),

  // ----- addNodeMark, removeNodeMark -----
  stepCase('addNodeMark on a paragraph (marks are not allowed there)', 'invalid-step', (ctx) => ({
    stepType: 'addNodeMark',
    pos: 0,
    mark: { type: 'em' },
  })),
  stepCase('addNodeMark at the end of the document (no node)', 'invalid-step', (ctx) => ({
    stepType: 'addNodeMark',
    pos: ctx.doc.content.size,
    mark: { type: 'em' },
  })),
  stepCase(
    'addNodeMark of an unknown mark',
    'invalid-step',
    mutated('addNodeMark', { mark: { type: 'blink' } }),
  ),
  stepCase(
    'addNodeMark of a javascript: link on an image',
    'invalid-step',
    mutated('addNodeMark', { mark: link('javascript:alert(1)') }),
  ),
  stepCase(
    'removeNodeMark of an unknown mark',
    'invalid-step',
    mutated('removeNodeMark', { mark: { type: 'blink' } }),
  ),

  // ----- attr and docAttr: attributes the schema does not define, or of the wrong type -----
  ...(['onclick', '__proto__', 'constructor', 'toString', 'style', 'src'] as const).map((attr) =>
    stepCase(
      `attr setting the undefined attribute "${attr}" on a heading`,
      'invalid-step',
      mutated('attr', { attr, value: 'x' }),
    ),
  ),
  ...(
    [
      ['9', 9],
      ['0', 0],
      ['"3"', '3'],
      ['2.5', 2.5],
      ['null', null],
      ['{}', {}],
      ['[3]', [3]],
      ['true', true],
    ] as const
  ).map(([label, value]) =>
    stepCase(`attr setting heading level ${label}`, 'invalid-step', mutated('attr', { value })),
  ),
  stepCase(
    'attr setting heading level to a value nested 20 deep',
    'invalid-step',
    mutated('attr', { value: deepJson(20, 3) }),
  ),
  stepCase(
    'attr setting heading level to a value nested 40 deep',
    'too-deep',
    mutated('attr', { value: deepJson(40, 3) }),
  ),
  stepCase('attr with a numeric attribute name', 'invalid-step', mutated('attr', { attr: 5 })),
  stepCase('attr on a text position', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: wordRange(ctx.doc, 'hello').from,
    attr: 'level',
    value: 1,
  })),
  stepCase('attr on a position past the document', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: ctx.doc.content.size + 5,
    attr: 'level',
    value: 1,
  })),
  stepCase('attr setting an image src to javascript:', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'image'),
    attr: 'src',
    value: 'javascript:alert(1)',
  })),
  stepCase('attr removing an image src (no value)', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'image'),
    attr: 'src',
  })),
  stepCase('attr setting an image alt to a number', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'image'),
    attr: 'alt',
    value: 1,
  })),
  stepCase('attr setting an image src over maxAttributeBytes', 'too-large', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'image'),
    attr: 'src',
    value: `https://example.com/${'a'.repeat(1100)}`,
  })),
  stepCase('attr setting a list order to -1', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'ordered_list'),
    attr: 'order',
    value: -1,
  })),
  stepCase('attr setting a list order to 10^12', 'invalid-step', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'ordered_list'),
    attr: 'order',
    value: 1e12,
  })),
  stepCase('attr setting an image src to a safe URL', 'accepted', (ctx) => ({
    stepType: 'attr',
    pos: nodePos(ctx.doc, 'image'),
    attr: 'src',
    value: 'https://example.com/b.png',
  })),
  ...(['title', '__proto__', 'constructor', 'level'] as const).map((attr) =>
    stepCase(`docAttr setting "${attr}" (the document has no attributes)`, 'invalid-step', () => ({
      stepType: 'docAttr',
      attr,
      value: 'x',
    })),
  ),
  stepCase('docAttr without an attribute name', 'invalid-step', () => ({
    stepType: 'docAttr',
    value: 'x',
  })),
  deepStepCase(
    'docAttr with a value nested 5,000 deep',
    'too-deep',
    () => ({ stepType: 'docAttr', attr: 'title', value: '<<deep>>' }),
    deepText(5000),
  ),

  // ----- attributes in inserted content -----
  stepCase(
    'a heading with an undefined attribute is stored without it',
    'accepted',
    () =>
      insertBlocks({
        type: 'heading',
        attrs: { level: 2, onclick: 'alert(1)' },
        content: [text('h')],
      }),
    (served) =>
      assert.ok(!JSON.stringify(served.doc).includes('onclick'), 'the attribute is dropped'),
  ),
  stepCase(
    'a mark with an undefined attribute is stored without it',
    'accepted',
    (ctx) => insertInline(ctx, text('m', [{ type: 'strong', attrs: { style: 'x' } }])),
    (served) =>
      assert.ok(!JSON.stringify(served.doc).includes('"style"'), 'the attribute is dropped'),
  ),
  stepCase(
    'a heading whose level is only in __proto__ gets the default level',
    'accepted',
    () =>
      insertBlocks({
        type: 'heading',
        attrs: jsonWithOwnKeys('{"__proto__":{"level":9}}'),
        content: [text('q')],
      }),
    (served) => assert.ok(!JSON.stringify(served.doc).includes('"level":9')),
  ),
  stepCase('a heading of level 9', 'invalid-step', () =>
    insertBlocks({ type: 'heading', attrs: { level: 9 }, content: [text('h')] }),
  ),
  stepCase('a heading of level "2"', 'invalid-step', () =>
    insertBlocks({ type: 'heading', attrs: { level: '2' }, content: [text('h')] }),
  ),
  stepCase('an ordered list starting at 1.5', 'invalid-step', () =>
    insertBlocks({
      type: 'ordered_list',
      attrs: { order: 1.5 },
      content: [{ type: 'list_item', content: [{ type: 'paragraph' }] }],
    }),
  ),
  stepCase('an image without src', 'invalid-step', (ctx) => insertInline(ctx, { type: 'image' })),
  stepCase('an image with a numeric alt', 'invalid-step', (ctx) =>
    insertInline(ctx, image('https://example.com/a.png', { alt: 5 })),
  ),
  stepCase('an image with an object title', 'invalid-step', (ctx) =>
    insertInline(ctx, image('https://example.com/a.png', { title: { x: 1 } })),
  ),
  stepCase('an image src over maxAttributeBytes', 'too-large', (ctx) =>
    insertInline(ctx, image(`data:image/png;base64,${'A'.repeat(1100)}`)),
  ),

  // ----- URLs: images -----
  ...(
    [
      'javascript:alert(1)',
      'JAVASCRIPT:alert(1)',
      'vbscript:msgbox(1)',
      'data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==',
      'data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+',
      'data:image/png,<svg onload=alert(1)>',
      'java\tscript:alert(1)',
      'java\nscript:alert(1)',
      ' javascript:alert(1)',
      ' https://example.com/a.png',
      'https://example.com/a.png ',
      '\u0000javascript:alert(1)',
      '\u0085https://example.com/a.png',
      '',
      'file:///etc/passwd',
    ] as const
  ).map((src) =>
    stepCase(`an image with src ${JSON.stringify(src)}`, 'invalid-step', (ctx) =>
      insertInline(ctx, image(src)),
    ),
  ),
  ...(
    [
      'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAE=',
      'https://example.com/ok.png',
      'images/relative.png',
      '//cdn.example.com/x.webp',
    ] as const
  ).map((src) =>
    stepCase(`an image with src ${JSON.stringify(src)} is accepted`, 'accepted', (ctx) =>
      insertInline(ctx, image(src)),
    ),
  ),

  // ----- URLs: links -----
  ...(
    [
      'javascript:alert(1)',
      'JaVaScRiPt:alert(1)',
      'vbscript:msgbox(1)',
      'data:text/html,<script>alert(1)</script>',
      'data:image/png;base64,iVBORw0KGgo=',
      'java\tscript:alert(1)',
      'java\rscript:alert(1)',
      '\njavascript:alert(1)',
      ' javascript:alert(1)',
      '\u0001javascript:alert(1)',
      'javascript:alert(1)\u007f',
      '',
      'file:///etc/passwd',
      'blob:https://example.com/x',
    ] as const
  ).map((href) =>
    stepCase(
      `addMark of a link to ${JSON.stringify(href)}`,
      'invalid-step',
      mutated('addMark', { mark: link(href) }),
    ),
  ),
  stepCase('a text inserted with a javascript: link', 'invalid-step', (ctx) =>
    insertInline(ctx, text('click', [link('javascript:alert(1)')])),
  ),
  stepCase('a link without href', 'invalid-step', mutated('addMark', { mark: { type: 'link' } })),
  stepCase(
    'a link href only in __proto__',
    'invalid-step',
    mutated('addMark', {
      mark: {
        type: 'link',
        attrs: jsonWithOwnKeys('{"__proto__":{"href":"https://example.com"}}'),
      },
    }),
  ),
  stepCase(
    'a link with a numeric title',
    'invalid-step',
    mutated('addMark', { mark: link('https://example.com', { title: 7 }) }),
  ),
  stepCase(
    'a link href over maxAttributeBytes',
    'too-large',
    mutated('addMark', { mark: link(`https://example.com/${'l'.repeat(1100)}`) }),
  ),
  ...(
    ['https://example.com/ok', 'mailto:someone@example.com', '/relative/path', '#anchor'] as const
  ).map((href) =>
    stepCase(
      `addMark of a link to ${JSON.stringify(href)} is accepted`,
      'accepted',
      mutated('addMark', { mark: link(href) }),
    ),
  ),
];

// Positions: every position field of every step type, with values that are not whole numbers
// within the document. The first field of each type gets every value, the others a few.
const badPositions: [string, unknown][] = [
  ['-1', -1],
  ['1.5', 1.5],
  ['10^9 (past the document)', 1e9],
  ['2^53', 2 ** 53],
  ['1e300', 1e300],
  ['"1"', '1'],
  ['"NaN"', 'NaN'],
  ['null (NaN and Infinity on the wire)', null],
  ['true', true],
  ['{}', {}],
  ['[]', []],
];
const fewerPositions = new Set([
  '-1',
  '1.5',
  '10^9 (past the document)',
  '"1"',
  'null (NaN and Infinity on the wire)',
]);
const positionFields: [StepTemplate, string[]][] = [
  ['replace', ['from', 'to']],
  ['replaceAround', ['from', 'to', 'gapFrom', 'gapTo', 'insert']],
  ['addMark', ['from', 'to']],
  ['removeMark', ['from', 'to']],
  ['markSet', ['from', 'to']],
  ['addNodeMark', ['pos']],
  ['removeNodeMark', ['pos']],
  ['attr', ['pos']],
];
for (const [template, fields] of positionFields) {
  fields.forEach((field, index) => {
    for (const [label, value] of badPositions) {
      if (index > 0 && !fewerPositions.has(label)) continue;
      messageCases.push(
        stepCase(
          `${template}.${field} = ${label}`,
          'invalid-step',
          mutated(template, { [field]: value }),
        ),
      );
    }
  });
}

// ----- the harness -----

interface Outcome {
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
class Corpus {
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
function within<T>(promise: Promise<T>, what: string, ms = 10_000): Promise<T> {
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
function rawEmit(
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

function assertOutcome(c: MessageCase, outcome: Outcome, before: Served): void {
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
async function handshake(url: string, c: HandshakeCase): Promise<Outcome> {
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
function rawGet(port: number, path: string): Promise<{ status: number; body: string }> {
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

function toCtx(served: Served): Ctx {
  return { doc: Node.fromJSON(schema, served.doc), version: served.version };
}

describe('hostile corpus (small limits)', () => {
  let server: TestServer;
  let corpus: Corpus;
  before(async () => {
    server = await startServer(small);
    corpus = new Corpus(server.url, 'hostile-corpus');
    await corpus.open();
    const state = corpus.honest.state!;
    corpus.honest.dispatch(state.tr.replaceWith(0, state.doc.content.size, seed.content));
    await within(corpus.honest.settled(), 'the honest editor');
  });
  after(async () => {
    corpus.close();
    await server.close();
  });

  it(`has at least 150 cases (${handshakeCases.length + messageCases.length + 3})`, () => {
    assert.ok(handshakeCases.length + messageCases.length + 3 >= 150);
  });

  it('answers every handshake case with its code and changes nothing', async () => {
    for (const c of handshakeCases) {
      const before = await corpus.served();
      const outcome = await handshake(server.url, c);
      if (c.expect === 'connected') {
        assert.equal(outcome.connected, true, `${c.name}: connects`);
        if (c.binds) {
          assert.equal((await fetch(`${server.url}/docs/${c.binds.doc}`)).status, 200);
          assert.equal((await fetch(`${server.url}/docs/${c.binds.not}`)).status, 404);
        }
      } else {
        assert.equal(outcome.connected, undefined, `${c.name}: refused`);
        const data = outcome.connectError as {
          code?: string;
          retryable?: boolean;
          message?: string;
        };
        assert.equal(data.code, c.expect, `${c.name}: ${JSON.stringify(data)}`);
        assert.equal(
          data.retryable,
          errors[c.expect].retryable,
          `${c.name}: retryable as in the table`,
        );
        if (c.message) assert.match(data.message ?? '', c.message, c.name);
        else assert.equal(data.message, errors[c.expect].message, c.name);
      }
      assert.deepEqual(await corpus.served(), before, `${c.name}: the document is unchanged`);
      await corpus.honestEdit(c.name);
    }
  });

  it('answers every message case with its code; refused ones change nothing', async () => {
    for (const c of messageCases) {
      const before = await corpus.served();
      const outcome = await corpus.send(c, toCtx(before));
      assertOutcome(c, outcome, before);
      const after = await corpus.served();
      if (c.expect === 'accepted') {
        assert.equal(after.version, (outcome.ack as { version: number }).version, c.name);
        c.check?.(after);
      } else {
        assert.deepEqual(after, before, `${c.name}: version and content unchanged`);
      }
      await corpus.honestEdit(c.name);
    }
    // Nothing above made the server drop a room or quarantine a document.
    assert.equal(server.server.rooms.roomFailures, 0, 'no room failed');
    assert.equal(server.server.rooms.corruptLoads, 0);
  });

  it('refuses a rebased batch whole when one of its steps no longer maps (stale)', async () => {
    // The honest editor writes "zap me" and the attacker prepares a batch at that version: a
    // typed letter (which still maps) and a mark on "zap" (which will not).
    await corpus.honestEdit('prepare');
    corpus.honest.dispatch(corpus.honest.state!.tr.insert(0, p('zap me')));
    await within(corpus.honest.settled(), 'the honest editor');
    const old = toCtx(await corpus.served());
    const zap = wordRange(old.doc, 'zap');
    const steps = [
      templates.replace(old),
      { stepType: 'addMark', mark: { type: 'strong' }, from: zap.from + 1, to: zap.to + 1 },
    ];
    // The honest editor deletes "zap" first.
    corpus.honest.dispatch(corpus.honest.state!.tr.delete(zap.from, zap.to));
    await within(corpus.honest.settled(), 'the honest editor');
    const before = await corpus.served();
    assertCoded(
      await ask(corpus.attacker, 'steps', { version: old.version, steps }),
      'stale',
      'partly rebasable batch',
    );
    assert.deepEqual(await corpus.served(), before, 'no step of the batch was applied');
    await corpus.honestEdit('after a partly rebasable batch');
  });

  it('refuses a resent batch as stale instead of applying it twice', async () => {
    const ctx = toCtx(await corpus.served());
    const message = { version: ctx.version, steps: [templates.replace(ctx)] };
    const first = await ask<{ ok: boolean; version: number }>(corpus.attacker, 'steps', message);
    assert.deepEqual(first, { ok: true, version: ctx.version + 1 });
    const before = await corpus.served();
    assertCoded(await ask(corpus.attacker, 'steps', message), 'stale', 'a resent batch');
    assert.deepEqual(await corpus.served(), before);
    await corpus.honestEdit('after a resend');
  });

  it('answers HTTP requests for ids . and .. with bad-document-id', async () => {
    // node:http, because fetch resolves dot segments (even %2E%2E) before sending.
    for (const id of ['%2E', '%2E%2E', '.%2E']) {
      const { status, body } = await rawGet(server.port, `/docs/${id}`);
      assert.equal(status, 400, id);
      assert.equal((JSON.parse(body) as { code: string }).code, 'bad-document-id');
    }
    await corpus.honestEdit('after HTTP');
  });
});

describe('hostile corpus (default limits)', () => {
  let server: TestServer;
  let dataDir: string;
  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'scriptorium-hostile-'));
    server = await startServer(noAdmissionLimits, new FileStore({ dataDir }));
  });
  after(async () => {
    await server.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('nested blockquotes by real wraps stop at maxDocDepth; the document still loads and restarts', async () => {
    const corpus = new Corpus(server.url, 'wraps');
    await corpus.open();
    try {
      await corpus.honestEdit('start');
      let ctx = toCtx(await corpus.served());
      // 2,000 wraps at once: over maxStepsPerBatch, and more than twice maxMessageBytes on the
      // wire, so Engine.IO closes the connection before any handler sees it.
      const twoThousand = wrapSteps(ctx.doc, 2000);
      assert.ok(JSON.stringify(twoThousand).length > 2 * defaults.maxMessageBytes);
      const closed = stepCase('2,000 wraps', 'disconnected', () => twoThousand);
      assertOutcome(closed, await corpus.send(closed, ctx), await corpus.served());
      // As many wraps as fit in one message: refused at the first wrap too deep, or by the time
      // budget before it (which comes first depends on the machine).
      const fitting = wrapSteps(ctx.doc, 300);
      assert.ok(JSON.stringify(fitting).length < defaults.maxMessageBytes);
      await corpus.ensureAttacker();
      const many = await ask<{ code?: string }>(corpus.attacker, 'steps', {
        version: ctx.version,
        steps: fitting,
      });
      assert.ok(['too-deep', 'too-large'].includes(many.code!), JSON.stringify(many));
      assertCoded(many, many.code!, '300 wraps');
      assert.equal((await corpus.served()).version, ctx.version, 'nothing applied');
      // One wrap per batch: accepted until the text would sit deeper than maxDocDepth (48).
      // The text starts at level 2 (doc, paragraph, text), so 46 wraps fit.
      let accepted = 0;
      for (let i = 0; i < 200; i++) {
        ctx = toCtx(await corpus.served());
        const answer = await ask<{ ok: boolean; code?: string }>(corpus.attacker, 'steps', {
          version: ctx.version,
          steps: wrapSteps(ctx.doc, 1),
        });
        if (!answer.ok) {
          assertCoded(answer, 'too-deep', 'the wrap past the limit');
          break;
        }
        accepted++;
      }
      assert.equal(accepted, 46, 'wraps accepted up to maxDocDepth');
      const deep = await corpus.served();
      // A new editor loads the deepest document the limits allow, and the honest one edits it.
      const late = openEditor(server.url, 'wraps', { clientID: 'late' });
      await within(late.ready(), 'a new editor');
      assert.deepEqual(JSON.parse(JSON.stringify(late.state!.doc.toJSON())), deep.doc);
      late.close();
      await corpus.honestEdit('at maxDocDepth');
    } finally {
      corpus.close();
    }
    // The snapshot written on shutdown loads in a new server.
    const served = await readServed(server.url, 'wraps');
    await server.close();
    server = await startServer(noAdmissionLimits, new FileStore({ dataDir }));
    assert.deepEqual(await readServed(server.url, 'wraps'), served);
  });

  it('refuses attribute values nested 5,000 deep', async () => {
    const corpus = new Corpus(server.url, 'deep-attrs');
    await corpus.open();
    try {
      const state = corpus.honest.state!;
      corpus.honest.dispatch(state.tr.replaceWith(0, state.doc.content.size, seed.content));
      await within(corpus.honest.settled(), 'the honest editor');
      const deepCases: MessageCase[] = [
        deepStepCase(
          'attr value nested 5,000 deep',
          'too-deep',
          mutated('attr', { value: '<<deep>>' }),
          deepText(5000, '3'),
        ),
        deepStepCase(
          'attr value of objects nested 5,000 deep',
          'too-deep',
          mutated('attr', { value: '<<deep>>' }),
          deepText(5000, '3', 'level'),
        ),
        deepStepCase(
          'link title nested 5,000 deep',
          'too-deep',
          mutated('addMark', { mark: link('https://example.com', { title: '<<deep>>' }) }),
          deepText(5000, '"t"'),
        ),
        deepStepCase(
          'image alt nested 5,000 deep',
          'too-deep',
          (ctx) => insertInline(ctx, image('https://example.com/a.png', { alt: '<<deep>>' })),
          deepText(5000, '"a"', 'alt'),
        ),
        deepStepCase(
          'a slice nested 5,000 deep in content',
          'too-deep',
          () => insertBlocks('<<deep>>'),
          deepText(5000, '{"type":"paragraph"}', 'content'),
        ),
        stepCase(
          'heading level nested 100 deep (within the message limit)',
          'invalid-step',
          mutated('attr', { value: deepJson(100, 3) }),
        ),
      ];
      for (const c of deepCases) {
        const before = await corpus.served();
        assertOutcome(c, await corpus.send(c, toCtx(before)), before);
        assert.deepEqual(await corpus.served(), before, c.name);
        await corpus.honestEdit(c.name);
      }
    } finally {
      corpus.close();
    }
  });

  it('big images: over the transport cap the connection closes, over maxAttributeBytes they are refused, and many allowed ones stop at maxDocBytes', async () => {
    const corpus = new Corpus(server.url, 'images');
    await corpus.open();
    try {
      await corpus.honestEdit('start');
      const src = (bytes: number) => `data:image/png;base64,${'A'.repeat(bytes)}`;
      const cases: MessageCase[] = [
        stepCase('an image with a 3.9 MB src', 'disconnected', (ctx) =>
          insertInline(ctx, image(src(3_900_000))),
        ),
        stepCase('an image with a src over maxAttributeBytes', 'too-large', (ctx) =>
          insertInline(ctx, image(src(defaults.maxAttributeBytes + 100))),
        ),
        stepCase('a message over maxMessageBytes (but under twice it)', 'too-large', (ctx) =>
          insertInline(ctx, ...Array.from({ length: 20 }, () => image(src(4_000)))),
        ),
        stepCase('100 images with 400-byte srcs in one batch', 'accepted', (ctx) =>
          insertInline(ctx, ...Array.from({ length: 100 }, () => image(src(400)))),
        ),
      ];
      for (const c of cases) {
        const before = await corpus.served();
        assertOutcome(c, await corpus.send(c, toCtx(before)), before);
        if (c.expect !== 'accepted') assert.deepEqual(await corpus.served(), before, c.name);
        await corpus.honestEdit(c.name);
      }
      // 100 messages of one image each with a src just under maxAttributeBytes: accepted until
      // the document would pass maxDocBytes, refused after.
      let accepted = 0;
      let refused = 0;
      const ctx = toCtx(await corpus.served());
      for (let i = 0; i < 100; i++) {
        // Each image goes to the start of the first paragraph, which stays where it is.
        const answer = await ask<{ ok: boolean; version: number }>(
          corpus.attacker,
          'steps',
          batch(ctx, insertInline(ctx, image(src(defaults.maxAttributeBytes - 100))))[0],
        );
        if (answer.ok) {
          assert.equal(refused, 0, 'nothing is accepted after the first refusal');
          ctx.version = answer.version;
          accepted++;
        } else {
          assertCoded(answer, 'too-large', `image message ${i}`);
          refused++;
        }
      }
      assert.ok(accepted >= 20 && refused >= 30, `accepted ${accepted}, refused ${refused}`);
      const served = await corpus.served();
      assert.ok(
        JSON.stringify(served.doc).length <= defaults.maxDocBytes,
        'the document stays within maxDocBytes',
      );
      await corpus.honestEdit('after the images');
    } finally {
      corpus.close();
    }
  });

  it('on a 150 KB document: bold over all of it is accepted; the biggest batches a message holds are applied or refused whole; past the limits they are refused', async () => {
    const corpus = new Corpus(server.url, 'full');
    await corpus.open();
    try {
      // About 150 KB of paragraphs, in messages under maxMessageBytes.
      for (let part = 0; part < 4; part++) {
        const ctx = toCtx(await corpus.served());
        const paragraphs = Array.from({ length: 300 }, (_, i) => ({
          type: 'paragraph',
          content: [text(`p${part}-${i} `.padEnd(70, 'lorem ipsum '))],
        }));
        const answer = await ask<{ ok: boolean }>(corpus.attacker, 'steps', {
          version: ctx.version,
          steps: [
            {
              stepType: 'replace',
              from: ctx.doc.content.size,
              to: ctx.doc.content.size,
              slice: { content: paragraphs },
            },
          ],
        });
        assert.equal(answer.ok, true, JSON.stringify(answer));
      }
      let before = await corpus.served();
      assert.ok(JSON.stringify(before.doc).length > 140_000);
      let ctx = toCtx(before);
      const starts = () => {
        const found: number[] = [];
        ctx.doc.forEach((_node, offset) => found.push(offset + 1));
        return found;
      };
      const typing = (count: number) => {
        const at = starts();
        const tr = new Transform(ctx.doc);
        for (let i = 0; i < count; i++)
          tr.insert(tr.mapping.map(at[(i * 2) % at.length]!), schema.text('x'));
        return tr.steps.map((step) => step.toJSON());
      };
      const bolding = (count: number) => {
        const at = starts();
        return Array.from({ length: count }, (_, i) => ({
          stepType: 'addMark',
          mark: { type: 'em' },
          from: at[i]!,
          to: at[i]! + 1,
        }));
      };
      // Past the limits: 1,000 typed steps are over maxMessageBytes; a markSet (what undoing a
      // mark change sends) of 12,000 mark steps is over twice that and closes the connection.
      assertCoded(
        await ask(corpus.attacker, 'steps', { version: ctx.version, steps: typing(1000) }),
        'too-large',
        '1,000 steps',
      );
      assert.deepEqual(await corpus.served(), before);
      const marks = stepCase('markSet of 12,000', 'disconnected', () => ({
        stepType: 'markSet',
        steps: Array.from({ length: 12 }, () => bolding(1000)).flat(),
      }));
      assertOutcome(marks, await corpus.send(marks, ctx), before);
      assert.deepEqual(await corpus.served(), before);
      // One step, however long it takes, is never refused by the time budget: bold over the
      // whole document is accepted.
      await corpus.ensureAttacker();
      const bold = await ask<{ ok: boolean; version: number }>(corpus.attacker, 'steps', {
        version: ctx.version,
        steps: [
          { stepType: 'addMark', mark: { type: 'strong' }, from: 0, to: ctx.doc.content.size },
        ],
      });
      assert.deepEqual(bold, { ok: true, version: ctx.version + 1 });
      before = await corpus.served();
      ctx = toCtx(before);
      // The biggest batches that fit in one message: whether they finish within maxApplyMs
      // depends on the machine, but each is applied whole (every step, one answer) or refused whole
      // (too-large, nothing changed).
      const biggest: [string, () => unknown[]][] = [
        ['600 typed steps', () => typing(600)],
        ['a markSet of 800 mark steps', () => [{ stepType: 'markSet', steps: bolding(800) }]],
      ];
      for (const [name, make] of biggest) {
        const steps = make();
        assert.ok(JSON.stringify(steps).length < defaults.maxMessageBytes, name);
        await corpus.ensureAttacker();
        const answer = await ask<{ ok: boolean; version?: number; code?: string }>(
          corpus.attacker,
          'steps',
          { version: ctx.version, steps },
        );
        const after = await corpus.served();
        if (answer.ok) {
          // Versions count steps (a markSet is one step): the whole batch, in one answer.
          assert.equal(answer.version, ctx.version + steps.length, name);
          assert.equal(after.version, ctx.version + steps.length, name);
        } else {
          assertCoded(answer, 'too-large', name);
          assert.deepEqual(after, before, name);
        }
        before = after;
        ctx = toCtx(after);
      }
      await corpus.honestEdit('after the big batches');
    } finally {
      corpus.close();
    }
  });
});
