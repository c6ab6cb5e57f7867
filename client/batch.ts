import type { Step } from 'prosemirror-transform';
import { errorBody, type ErrorBody } from '../schema/errors.js';
import { type BatchLimits, type StepJSON } from '../schema/events.js';
import { measureStep } from './step_limits.js';

/// What bounds the next batch: the client's own cap on its steps (`batchLimit`), how many
/// first steps are suspect (sent one batch of their own), the server's limits from its join
/// answer, and the configured `maxBatchBytes`.
export interface BatchBounds {
  readonly batchLimit: number;
  readonly suspect: number;
  readonly limits: BatchLimits | null;
  readonly maxBatchBytes: number | undefined;
}

/// What a batch may hold when the server does not say: half the server's default message limit.
const defaultMaxBatchBytes = 32 * 1024;

/// Bytes of `{"version":,"steps":[]}`: a `steps` message but its version and its steps.
const messageBytes = 23;

/// Bytes of socket.io's packet around a message, at most: `42<ack id>["steps",…]`.
const packetBytes = 32;

/// The JSON of the next batch: the first `unconfirmed` steps, as many as `bounds` allow, up to
/// the first the server would refuse (`measureStep`); or, when the first step alone is one the
/// server would refuse (over its message size, a string or a nesting over its payload
/// limits), the refusal to drop it with. `version` is the one the batch is sent at.
export function nextBatch(
  unconfirmed: readonly Step[],
  version: number,
  bounds: BatchBounds,
): StepJSON[] | ErrorBody {
  const limits = bounds.limits;
  // Suspect steps go on their own, never with steps after them the server has not refused.
  const maxSteps = Math.min(
    bounds.batchLimit,
    limits?.maxStepsPerBatch ?? Infinity,
    bounds.suspect > 0 ? bounds.suspect : Infinity,
  );
  const maxBytes =
    bounds.maxBatchBytes ??
    (limits ? Math.floor(limits.maxMessageBytes * 0.9) : defaultMaxBatchBytes);
  const steps: StepJSON[] = [];
  let bytes = 0;
  for (let i = 0; i < unconfirmed.length && steps.length < maxSteps; i++) {
    const json = unconfirmed[i]!.toJSON() as StepJSON;
    const size = utf8Length(JSON.stringify(json)) + 1;
    if (steps.length > 0 && bytes + size > maxBytes) break;
    const gate = limits ? measureStep(json, version, limits) : null;
    // A step the gate would refuse (a string or a nesting over its limits) is not sent with
    // the steps before it, which would be refused with it: it ends the batch, and is dropped
    // once it comes first.
    if (gate && !gate.ok) return steps.length > 0 ? steps : errorBody(gate.code, gate.message);
    // A lone step whose message the gate would refuse as too large (the message around it
    // counts: a step that fits the limit only without it would be sent, refused and struck),
    // or whose frame would close the connection (Engine.IO's cap, twice the limit in real
    // bytes with its packet's few bytes around it), is dropped unsent.
    if (
      steps.length === 0 &&
      limits &&
      gate &&
      (gate.bytes > limits.maxMessageBytes ||
        size - 1 + messageBytes + decimalDigits(version) + packetBytes > 2 * limits.maxMessageBytes)
    ) {
      return errorBody('too-large', 'A local step is larger than the server takes');
    }
    steps.push(json);
    bytes += size;
  }
  return steps;
}

/// Digits of a version in JSON, without making a string of it (once per batch).
function decimalDigits(n: number): number {
  let digits = 1;
  for (let limit = 10; n >= limit; limit *= 10) digits++;
  return digits;
}

/// The bytes of `text` (JSON text, where a surrogate is always one of a pair: a lone one is
/// escaped as `\udxxx`) in UTF-8.
function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) continue;
    // Each half of a surrogate pair is 2 of its 4 bytes (not 3, as a character above 0x800:
    // a paste of emoji near Engine.IO's cap would be dropped unsent though the server takes it).
    if (code >= 0xd800 && code <= 0xdfff) bytes += 1;
    else bytes += code < 0x800 ? 1 : 2;
  }
  return bytes;
}
