import type { Socket } from 'socket.io-client';
import type { Config } from '../server/config.js';
import { HostileDoc, repeatShape, type GrowthShape } from './hostile_client.js';

// The documents the hostile cases (`hostile_cases.ts`) run on, and what the cases share.
//
// The documents are grown to the limits by the hostile client itself, with pastes just under
// `maxMessageBytes` (halved whenever one is refused), as an attacker would:
// - A: empty paragraphs (~21 bytes, 2 positions each) all inside one blockquote: the longest
//   list of children, so that every step copies the longest fragment; the blockquote lets a
//   lift/wrap pair leave the document as it was. Its growth stops when even a one-paragraph
//   paste takes longer than `maxApplyMs`, which may come before `maxDocBytes`.
// - N: empty paragraphs in blockquotes of 256, up to `maxDocBytes`: the most nodes a
//   document may hold, for everything that walks the whole document (serialise, parse, check).
// - B: one-character paragraphs (~60 bytes) in blockquotes of 256, up to `maxDocBytes`: the
//   most text nodes for a mark to touch.
// - C: paragraphs of control characters (U+0001), which the size estimate counts as one byte
//   each and JSON writes as six (`\u0001`): the largest JSON a document within limits has.

/// The documents, by letter.
export type DocName = 'a' | 'n' | 'b' | 'c';

/// What the cases share within one repetition (one server child).
export interface CaseContext {
  url: string;
  config: Readonly<Config>;
  docs: Partial<Record<DocName, HostileDoc>>;
  /// Sockets opened by a `prepare`, used by its `run`, closed after the case.
  sockets: Socket[];
  /// `/healthz` documents count before the last socket of N left (see `leave-snapshot`).
  documentsBeforeLeave: number | null;
  /// Whether the last attempt to make a new version of N was accepted.
  touched: boolean;
  /// The pass (1: every case runs in code the server has not run yet; 2: again, warm), which
  /// names the documents, so that a pass starts from new ones.
  pass: number;
}

/// The id of document `name` in this pass.
export function docId(ctx: CaseContext, name: string): string {
  return `p${ctx.pass}-hostile-${name}`;
}

/// One case: what it sends, and on which document.
export interface Case {
  name: string;
  /// Documents it needs grown first.
  needs: DocName[];
  /// The table's description.
  what: string;
  prepare?: (ctx: CaseContext) => Promise<void>;
  run: (ctx: CaseContext) => Promise<string>;
  /// How long to keep watching after the answer (work the server does after answering).
  settleMs?: number;
}

// Small enough that one group fits the smallest message limits worth trying (64 KiB).
const groupSize = 256;

/// Grows the documents `needs` names that are not grown yet; logs what each became.
export async function growDocs(
  ctx: CaseContext,
  needs: readonly DocName[],
  log: (line: string) => void,
): Promise<void> {
  const maxBytes = ctx.config.maxMessageBytes;
  if (needs.includes('a') && !ctx.docs.a) {
    const a = await HostileDoc.open(ctx.url, docId(ctx, 'a'), 'mallory-a');
    const wrapped = await a.send([
      {
        stepType: 'replace',
        from: 0,
        to: 2,
        slice: { content: [{ type: 'blockquote', content: [{ type: 'paragraph' }] }] },
      },
    ]);
    if (!wrapped.ok) throw new Error(`hostile-a: ${wrapped.code}`);
    a.size = 4;
    const shape = repeatShape({ type: 'paragraph' }, 2, maxBytes);
    const sent = await a.grow(shape, () => a.size - 1, 4096);
    const paragraphs = (a.size - 2) / 2;
    log(
      `A: ${paragraphs} empty paragraphs in one blockquote (~${mib(paragraphs * 21)} MiB), ${sent} pastes`,
    );
    ctx.docs.a = a;
  }
  if (needs.includes('n') && !ctx.docs.n) {
    const n = await HostileDoc.open(ctx.url, docId(ctx, 'n'), 'mallory-n');
    const group = { type: 'blockquote', content: new Array(groupSize).fill({ type: 'paragraph' }) };
    const sent = await n.grow(repeatShape(group, 2 + 2 * groupSize, maxBytes), () => n.size, 64);
    const paragraphs = 1 + ((n.size - 2) / (2 + 2 * groupSize)) * groupSize;
    log(
      `N: ${paragraphs} empty paragraphs in blockquotes of ${groupSize} (~${mib(paragraphs * 21)} MiB), ${sent} pastes`,
    );
    ctx.docs.n = n;
  }
  if (needs.includes('b') && !ctx.docs.b) {
    const b = await HostileDoc.open(ctx.url, docId(ctx, 'b'), 'mallory-b');
    const paragraph = { type: 'paragraph', content: [{ type: 'text', text: 'x' }] };
    const group = { type: 'blockquote', content: new Array(groupSize).fill(paragraph) };
    const sent = await b.grow(repeatShape(group, 2 + 3 * groupSize, maxBytes), () => b.size, 32);
    const paragraphs = ((b.size - 2) / (2 + 3 * groupSize)) * groupSize;
    log(
      `B: ${paragraphs} one-character paragraphs in blockquotes of ${groupSize} (~${mib(paragraphs * 60)} MiB), ${sent} pastes`,
    );
    ctx.docs.b = b;
  }
  if (needs.includes('c') && !ctx.docs.c) {
    const c = await HostileDoc.open(ctx.url, docId(ctx, 'c'), 'mallory-c');
    // Each character is six bytes on the wire: the engine's frame cap (2 × maxMessageBytes)
    // binds before the gate's estimate does.
    const shape: GrowthShape = {
      unit: (n) => ({
        content: [{ type: 'paragraph', content: [{ type: 'text', text: '\u0001'.repeat(n) }] }],
        positions: n + 2,
      }),
      maxN: Math.min(maxBytes - 512, Math.floor((2 * maxBytes - 4096) / 6)),
    };
    const sent = await c.grow(shape, () => c.size, shape.maxN);
    log(
      `C: ${c.size} positions of control characters (~${mib(6 * c.size)} MiB of JSON), ${sent} pastes`,
    );
    ctx.docs.c = c;
  }
}

/// The mebibytes in `bytes`, to two decimals.
function mib(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(2);
}

/// Resolves after `ms` milliseconds.
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
