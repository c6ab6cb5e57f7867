/// Limits on a JSON value that arrived from outside (a message, a stored entry), checked
/// before anything else looks at it.
export interface JsonLimits {
  /// Deepest nesting of objects and arrays; the value itself is depth 1.
  maxDepth: number;
  /// Largest size, in bytes of its JSON text (at most that, see `measureJson`).
  maxBytes: number;
  /// Longest string other than a text node's `text` (attribute values, URLs, names).
  maxStringBytes: number;
}

/// The outcome of `measureJson`: the estimated size, or the limit that was crossed.
export type JsonMeasure =
  | { ok: true; bytes: number }
  | { ok: false; code: 'too-deep' | 'too-large' | 'bad-request'; message: string };

/// Limits that never refuse anything: for measuring values the server made itself.
export const unlimitedJson: Readonly<JsonLimits> = Object.freeze({
  maxDepth: Infinity,
  maxBytes: Infinity,
  maxStringBytes: Infinity,
});

// One reusable explicit stack for every call: `measureJson` never recurses (a message nested
// 100,000 deep must be refused, not overflow the stack), and the hot path (every message)
// allocates nothing but the stack's growth, once.
const stackValues: unknown[] = [];
const stackDepths: number[] = [];

/// Walks `value` iteratively and returns its size in bytes of JSON text, or the first limit it
/// crosses. The count is exact for ASCII text without escapes and never above the truth
/// otherwise: strings count their UTF-16 length plus quotes (not their escapes, nor the extra
/// bytes of UTF-8), numbers their digits, keys their length plus quotes and colon, and the
/// commas between items. Never above, because clients size their batches by the JSON they send
/// (the reference client keeps a batch under 90% of the limit): an estimate above the truth
/// would refuse an honest backlog of short steps as `too-large`, each refusal a strike, until
/// the socket is closed `too-many-errors`. Only the values JSON can carry are
/// accepted: anything else (a Buffer from a binary packet, a function) is `bad-request`.
/// Walking stops at the first limit crossed, so refusing a huge value costs no more than the
/// limit.
export function measureJson(value: unknown, limits: Readonly<JsonLimits>): JsonMeasure {
  let bytes = 0;
  let top = 0;
  stackValues[0] = value;
  stackDepths[0] = 1;
  top = 1;
  // `text` marks the one place long strings belong: a text node's content.
  let textKey = false;
  try {
    while (top > 0) {
      top--;
      const item = stackValues[top];
      const depth = stackDepths[top]!;
      stackValues[top] = undefined;
      if (item === textKeyMarker) {
        textKey = true;
        continue;
      }
      const isText = textKey;
      textKey = false;
      switch (typeof item) {
        case 'string':
          if (!isText && item.length > limits.maxStringBytes) return stringTooLong(item, limits);
          bytes += item.length + 2;
          break;
        case 'number':
          bytes += numberLength(item);
          break;
        case 'boolean':
          bytes += item ? 4 : 5;
          break;
        case 'object': {
          if (item === null) {
            bytes += 4;
            break;
          }
          if (depth > limits.maxDepth) return tooDeep(limits);
          if (Array.isArray(item)) {
            // Brackets and the commas between items.
            bytes += item.length === 0 ? 2 : 1 + item.length;
            for (let i = item.length - 1; i >= 0; i--) {
              stackValues[top] = item[i];
              stackDepths[top] = depth + 1;
              top++;
            }
          } else if (isPlainObject(item)) {
            const keys = Object.keys(item);
            // Braces and the commas between members; each member's key, quotes and colon.
            bytes += keys.length === 0 ? 2 : 1 + keys.length;
            for (let i = 0; i < keys.length; i++) {
              const key = keys[i]!;
              bytes += key.length + 3;
              stackValues[top] = (item as Record<string, unknown>)[key];
              stackDepths[top] = depth + 1;
              top++;
              if (key === 'text') {
                // Pushed after the value, so popped right before it.
                stackValues[top] = textKeyMarker;
                stackDepths[top] = depth + 1;
                top++;
              }
            }
          } else {
            return { ok: false, code: 'bad-request', message: 'Binary payloads are not accepted' };
          }
          break;
        }
        default:
          return { ok: false, code: 'bad-request', message: `A ${typeof item} is not JSON` };
      }
      if (bytes > limits.maxBytes) return tooLarge(limits);
    }
    return { ok: true, bytes };
  } finally {
    // Drop references a refused walk left behind, so a huge payload is not kept alive.
    for (let i = 0; i < top; i++) stackValues[i] = undefined;
  }
}

const textKeyMarker = Symbol('text');

// The refusals, built only on the way out of a walk that crossed a limit.

function stringTooLong(item: string, limits: Readonly<JsonLimits>): JsonMeasure {
  return {
    ok: false,
    code: 'too-large',
    message: `A string of ${item.length} characters exceeds the limit of ${limits.maxStringBytes}`,
  };
}

function tooDeep(limits: Readonly<JsonLimits>): JsonMeasure {
  return {
    ok: false,
    code: 'too-deep',
    message: `The message is nested deeper than ${limits.maxDepth} levels`,
  };
}

function tooLarge(limits: Readonly<JsonLimits>): JsonMeasure {
  return {
    ok: false,
    code: 'too-large',
    message: `The message is larger than ${limits.maxBytes} bytes`,
  };
}

/// The length of `n` in JSON: counted without making a string for the common case, a
/// non-negative integer (positions, versions, levels).
function numberLength(n: number): number {
  if (Number.isInteger(n) && n >= 0 && n < 1e15) {
    let digits = 1;
    for (let limit = 10; n >= limit; limit *= 10) digits++;
    return digits;
  }
  return String(n).length;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}
