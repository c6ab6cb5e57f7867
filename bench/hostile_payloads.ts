import type { StepJSON, StepsAnswer } from '../schema/events.js';
import type { Config } from '../server/config.js';
import type { CaseContext } from './hostile_docs.js';
import { ask, gateBytes, outcomeOf } from './hostile_client.js';

// The payloads the hostile cases send, built to sit just within (or just past) a limit.

/// The longest even-length prefix of `steps` (the cases send steps in pairs that undo each
/// other) whose message stays within `maxMessageBytes`: as many as a client may send at once.
export function fit(config: Readonly<Config>, steps: StepJSON[]): StepJSON[] {
  let bytes = gateBytes({ version: 0, steps: [] });
  let count = 0;
  while (count < steps.length) {
    bytes += gateBytes(steps[count]) + 1;
    if (bytes > config.maxMessageBytes) break;
    count++;
  }
  return steps.slice(0, count - (count % 2));
}

/// Sends `{version: 0, steps: [item, item, …]}` in one frame just under the engine's cap.
export async function sendFrame(ctx: CaseContext, item: unknown): Promise<string> {
  const each = JSON.stringify(item).length + 1;
  const count = Math.floor((2 * ctx.config.maxMessageBytes - 4096) / each);
  const steps = new Array(count).fill(item);
  return outcomeOf(await ask<StepsAnswer>(ctx.sockets[0]!, 'steps', { version: 0, steps }));
}

/// `[[[…]]]`, `levels` arrays deep.
export function nestedArrays(levels: number): unknown {
  let value: unknown[] = [];
  for (let i = 1; i < levels; i++) value = [value];
  return value;
}

export /// How deep `value` nests objects and arrays (a scalar is 0).
function jsonDepth(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  let deepest = 0;
  for (const child of Object.values(value)) deepest = Math.max(deepest, jsonDepth(child));
  return deepest + 1;
}

/// `count` steps typing `char` one after another in the first paragraph, from its offset `at`.
export function typing(count: number, char: string, at = 0): StepJSON[] {
  const steps: StepJSON[] = [];
  for (let i = at; i < at + count; i++) {
    steps.push({
      stepType: 'replace',
      from: 1 + i,
      to: 1 + i,
      slice: { content: [{ type: 'text', text: char }] },
    });
  }
  return steps;
}
