import { measureJson, type JsonMeasure } from '../schema/json_limits.js';
import { type BatchLimits } from '../schema/events.js';

// What the server's payload gate refuses in a step before reading it, checked here so that a
// step it would refuse is never sent: each refusal of the gate is a strike against the
// connection (a burst of them closes it `too-many-errors`, for good), and the gate does not say
// which step of a batch it refused, so an offline backlog with a dozen pasted data: images
// would cost a strike per image and more, and close the connection with the edits after them
// unsent.

/// A `steps` message at `version` holding only `step` (its JSON), measured by the server's
/// payload gate itself (`measureJson`) for the `limits` of the last join answer: a string over
/// `maxAttributeBytes` anywhere but as a `text` key's value is `too-large`, a nesting deeper
/// than `maxJsonDepth` is `too-deep` (neither checked when the server did not say them), and
/// otherwise `bytes` is the message's size as the gate counts it, which is what it compares
/// with `maxMessageBytes`. The gate's own code rather than a copy of it: a copy that counts
/// UTF-8 or JSON escapes otherwise drops, unsent, pastes the server takes.
export function measureStep(
  step: unknown,
  version: number,
  limits: Readonly<BatchLimits>,
): JsonMeasure {
  return measureJson(
    { version, steps: [step] },
    {
      maxBytes: Infinity,
      maxStringBytes: limits.maxAttributeBytes ?? Infinity,
      maxDepth: limits.maxJsonDepth ?? Infinity,
    },
  );
}
