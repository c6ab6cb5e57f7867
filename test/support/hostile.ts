import assert from 'node:assert/strict';
import { Node } from 'prosemirror-model';
import { findWrapping, Transform } from 'prosemirror-transform';
import { errors, isErrorCode } from '../../schema/errors.js';
import { schema } from '../../schema/index.js';
import { type DocJSON, type StepJSON } from '../../schema/events.js';
import type { Config } from '../../server/config.js';

// Shared by the hostile-input tests: limits that keep admission control (rate limits,
// connection caps, protocol-error budgets) out of the way of tests that send hundreds of bad
// messages on purpose, payload builders, and the assertions every refusal must pass.

/// Config overrides that switch admission control off (0 = no limit), so that a test of what
/// one message does is not cut short by how many it sent.
export const noAdmissionLimits: Partial<Config> = {
  batchesPerSecond: 0,
  pullsPerSecond: 0,
  maxConnectionsPerIp: 0,
  maxSocketsPerClient: 0,
  maxDocumentsPerUser: 0,
  newDocumentsPerMinute: 0,
  maxProtocolErrors: 1_000_000,
  handshakesPerMinute: 0,
  framesPerSecond: 0,
  frameBytesPerSecond: 0,
  addressFramesPerSecond: 0,
  addressFrameBytesPerSecond: 0,
};

/// The same as environment variables, for servers run as child processes.
export const noAdmissionEnv: Record<string, string> = {
  BATCHES_PER_SECOND: '0',
  PULLS_PER_SECOND: '0',
  MAX_CONNECTIONS_PER_IP: '0',
  MAX_SOCKETS_PER_CLIENT: '0',
  MAX_DOCUMENTS_PER_USER: '0',
  NEW_DOCUMENTS_PER_MINUTE: '0',
  MAX_PROTOCOL_ERRORS: '1000000',
  HANDSHAKES_PER_MINUTE: '0',
  FRAMES_PER_SECOND: '0',
  FRAME_BYTES_PER_SECOND: '0',
  ADDRESS_FRAMES_PER_SECOND: '0',
  ADDRESS_FRAME_BYTES_PER_SECOND: '0',
};

/// A JSON value nested `depth` levels deep (arrays, or objects under `key`), built without
/// recursion. The innermost value is `leaf`.
export function deepJson(depth: number, leaf: unknown = 1, key: string | null = null): unknown {
  let value = leaf;
  for (let i = 0; i < depth; i++) value = key === null ? [value] : { [key]: value };
  return value;
}

/// What `GET /docs/:id` serves: the published version and document.
export interface Served {
  version: number;
  epoch: string;
  doc: DocJSON;
}

/// Reads `GET /docs/:id`; fails the test unless it answers 200.
export async function readServed(url: string, docId: string): Promise<Served> {
  const response = await fetch(`${url}/docs/${encodeURIComponent(docId)}`);
  assert.equal(response.status, 200, `GET /docs/${docId} answers 200`);
  return (await response.json()) as Served;
}

/// Asserts that `answer` is a refusal in the shape of the error table: `{ok: false}` with a
/// known `code` equal to `expected`, the table's `retryable`, and a message.
export function assertCoded(answer: unknown, expected: string, what: string): void {
  const body = answer as { ok?: unknown; code?: unknown; retryable?: unknown; message?: unknown };
  assert.equal(body?.ok, false, `${what}: refused (got ${JSON.stringify(answer)?.slice(0, 300)})`);
  assert.ok(isErrorCode(body.code), `${what}: ${String(body.code)} is a code of the table`);
  assert.equal(body.code, expected, `${what}: ${String(body.message)}`);
  assert.equal(body.retryable, errors[body.code].retryable, `${what}: retryable as in the table`);
  assert.equal(typeof body.message, 'string');
  assert.ok((body.message as string).length > 0, `${what}: a message`);
}

/// Position just inside the first textblock of `doc` (its content starts there).
export function firstTextPos(doc: Node): number {
  let pos = 0;
  let node = doc;
  while (!node.isTextblock) {
    node = node.firstChild!;
    pos++;
  }
  return pos;
}

/// `count` real wrap steps, as prosemirror-transform makes them: the first textblock of `doc`
/// wrapped in one more blockquote by each (`tr.wrap` against the document each step left).
/// Builds deeply nested documents without recursion in the test.
export function wrapSteps(doc: Node, count: number): StepJSON[] {
  const steps: StepJSON[] = [];
  // One transform per wrap, so that the documents in between can be collected.
  let current = doc;
  for (let i = 0; i < count; i++) {
    const tr = new Transform(current);
    const range = current.resolve(firstTextPos(current)).blockRange()!;
    tr.wrap(range, findWrapping(range, schema.nodes.blockquote!)!);
    steps.push(tr.steps[0]!.toJSON() as StepJSON);
    current = tr.doc;
  }
  return steps;
}

/// Parses JSON text: objects with an own `__proto__` or `constructor` key, as an attacker
/// sends them (an object literal would set the prototype instead).
export function jsonWithOwnKeys(text: string): unknown {
  return JSON.parse(text) as unknown;
}

/// JSON text sent as it is, for values the client library cannot encode: `JSON.stringify`
/// overflows the stack on values nested a few thousand deep, which `JSON.parse` on the server
/// reads without trouble.
export class RawJson {
  constructor(readonly text: string) {}
}

/// JSON text nested `depth` levels deep: arrays, or objects under `key`, around `leaf` (text).
export function deepText(depth: number, leaf = '1', key: string | null = null): string {
  return key === null
    ? '['.repeat(depth) + leaf + ']'.repeat(depth)
    : `{${JSON.stringify(key)}:`.repeat(depth) + leaf + '}'.repeat(depth);
}

/// `value` as JSON text with each string `"<<name>>"` replaced by `holes[name]` (raw JSON).
export function rawWith(value: unknown, holes: Record<string, string>): RawJson {
  let text = JSON.stringify(value);
  for (const [name, hole] of Object.entries(holes)) {
    text = text.split(JSON.stringify(`<<${name}>>`)).join(hole);
  }
  return new RawJson(text);
}
