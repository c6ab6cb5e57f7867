import { errorBody, type BatchLimits, type ErrorBody } from '../schema/index.js';

// What the server's payload gate refuses in a step before reading it, checked here so that a
// step it would refuse is never sent: each refusal of the gate is a strike against the
// connection (20 in a burst close it `too-many-errors`, for good), and the gate does not say which step of
// a batch it refused, so an offline backlog with a dozen pasted data: images cost a strike per
// image and more, and the connection was closed with the edits after them unsent.

/// Depth of a step in a `steps` message: the message is 1, its `steps` array 2.
const stepDepth = 3;

/// The refusal the server's payload gate would answer a `steps` message holding `step` (its
/// JSON) with, for the `limits` of its last join answer: `too-large` for a string over
/// `maxAttributeBytes` UTF-16 code units anywhere but as a `text` key's value, `too-deep` for
/// an object or array deeper than `maxJsonDepth` in the message; null when it would pass them
/// (or the server did not say them). The message is the one the gate writes.
export function stepOverLimits(step: unknown, limits: Readonly<BatchLimits>): ErrorBody | null {
  const maxString = limits.maxAttributeBytes ?? Infinity;
  const maxDepth = limits.maxJsonDepth ?? Infinity;
  if (maxString === Infinity && maxDepth === Infinity) return null;
  return walk(step, stepDepth, false, maxString, maxDepth);
}

// Recursive: local steps come from ProseMirror's own `toJSON` (as deep as the document, which
// `toJSON` recursed through already), and a server's depth limit stops the walk early.
function walk(
  value: unknown,
  depth: number,
  isText: boolean,
  maxString: number,
  maxDepth: number,
): ErrorBody | null {
  if (typeof value === 'string') {
    // As the gate: only a string that is a `text` key's value may be longer.
    if (isText || value.length <= maxString) return null;
    return errorBody(
      'too-large',
      `A string of ${value.length} characters exceeds the limit of ${maxString}`,
    );
  }
  if (typeof value !== 'object' || value === null) return null;
  if (depth > maxDepth) {
    return errorBody('too-deep', `The message is nested deeper than ${maxDepth} levels`);
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const refused = walk(value[i], depth + 1, false, maxString, maxDepth);
      if (refused) return refused;
    }
    return null;
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const refused = walk(record[key], depth + 1, key === 'text', maxString, maxDepth);
    if (refused) return refused;
  }
  return null;
}

/// The size of `value` (a step's JSON) as the server's payload gate counts it, which is what
/// it compares with `maxMessageBytes`: strings their UTF-16 length plus quotes (not their
/// escapes, nor the extra bytes of UTF-8), numbers their digits, keys their length plus quotes
/// and colon, and the commas between items. `JSON.stringify`'s UTF-8 length is larger for text
/// with quotes, newlines or anything outside ASCII: judged by it, a paste of 2,500 "é" under a
/// 4 KiB limit was dropped as too large, unsent, though the server takes it.
export function gateBytes(value: unknown): number {
  switch (typeof value) {
    case 'string':
      return value.length + 2;
    case 'number':
      return JSON.stringify(value).length;
    case 'boolean':
      return value ? 4 : 5;
    case 'object': {
      if (value === null) return 4;
      if (Array.isArray(value)) {
        let bytes = value.length === 0 ? 2 : 1 + value.length;
        for (let i = 0; i < value.length; i++) bytes += gateBytes(value[i]);
        return bytes;
      }
      const record = value as Record<string, unknown>;
      const keys = Object.keys(record);
      let bytes = keys.length === 0 ? 2 : 1 + keys.length;
      for (let i = 0; i < keys.length; i++)
        bytes += keys[i]!.length + 3 + gateBytes(record[keys[i]!]);
      return bytes;
    }
    default:
      return 0;
  }
}
