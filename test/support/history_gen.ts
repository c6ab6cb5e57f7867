import fc from 'fast-check';
import type { Node } from 'prosemirror-model';
import { EditorState, type Transaction } from 'prosemirror-state';
import type { Step } from 'prosemirror-transform';
import { Random } from '../../client-sim/random.js';
import { randomEdit, type EditKind } from '../../client-sim/workload.js';
import { schema } from '../../schema/index.js';
import { rebaseSteps } from '../../schema/rebase.js';
import type { HistoryStep } from '../../server/history/types.js';

// Random multi-author histories for the history algorithms' property tests. Every character
// is unique and tells who typed it: the base document's text comes from one block of CJK code
// points, each user's from another, numbered in typing order. So a test can say, of any
// character in any version, who typed it, and of any base character gone, whether it still
// exists.

export const users = ['ann', 'bob', 'cy'] as const;

const baseBlock = 0x4e00;
const userBlock = 0x6000;
const blockSize = 0x0800;

/// Who typed `char`: a user's name, 'base' for the base document's text, or null for a
/// character none of them made (none should exist).
export function typist(char: string): string | null {
  const code = char.charCodeAt(0);
  if (code >= baseBlock && code < baseBlock + blockSize) return 'base';
  const index = Math.floor((code - userBlock) / blockSize);
  return code >= userBlock && index < users.length ? users[index]! : null;
}

/// A history: the base document, the accepted steps (each applies to the document after the
/// ones before it) and the document after them all.
export interface History {
  base: Node;
  steps: HistoryStep[];
  head: Node;
}

/// Generates unique characters per author.
class Typewriter {
  private readonly next = new Map<string, number>();

  type(author: string, count: number): string {
    const start =
      author === 'base' ? baseBlock : userBlock + users.indexOf(author as never) * blockSize;
    let n = this.next.get(author) ?? 0;
    let text = '';
    for (let i = 0; i < count; i++) text += String.fromCharCode(start + n++);
    this.next.set(author, n);
    return text;
  }
}

/// A base document of a few paragraphs and a heading, some of it bold, in base characters.
function baseDoc(random: Random, typewriter: Typewriter): Node {
  const blocks: Node[] = [];
  const count = random.int(1, 4);
  for (let i = 0; i < count; i++) {
    const plain = schema.text(typewriter.type('base', random.int(1, 8)));
    const content = random.chance(0.3)
      ? [
          plain,
          schema.text(typewriter.type('base', random.int(1, 4)), [schema.marks.strong!.create()]),
        ]
      : [plain];
    blocks.push(
      random.chance(0.2)
        ? schema.node('heading', { level: random.int(1, 3) }, content)
        : schema.node('paragraph', null, content),
    );
  }
  return schema.node('doc', null, blocks);
}

const kinds: EditKind[] = [
  'type',
  'type',
  'type',
  'delete',
  'deleteAcrossBlocks',
  'enter',
  'join',
  'mark',
  'list',
  'heading',
];

/// One random edit by `user` on `state`: typing unique characters, or one of the simulator's
/// edits (deleting, splitting and joining blocks, marks, lists, headings), or a heading's level
/// changed in place (an AttrStep). Null when the edit does not fit the document.
function edit(
  state: EditorState,
  user: string,
  random: Random,
  typewriter: Typewriter,
): Transaction | null {
  const roll = random.int(0, kinds.length);
  if (roll === kinds.length) return levelEdit(state, random);
  const kind = kinds[roll]!;
  if (kind !== 'type') return randomEdit(state, random, kind);
  const places: number[] = [];
  state.doc.descendants((node, pos) => {
    if (node.isTextblock) for (let p = 0; p <= node.content.size; p++) places.push(pos + 1 + p);
    return !node.isTextblock;
  });
  if (places.length === 0) return null;
  return state.tr.insertText(typewriter.type(user, random.int(1, 4)), random.pick(places));
}

function levelEdit(state: EditorState, random: Random): Transaction | null {
  const headings: number[] = [];
  state.doc.descendants((node, pos) => {
    if (node.type.name === 'heading') headings.push(pos);
    return true;
  });
  if (headings.length === 0) return null;
  const pos = random.pick(headings);
  const level = ((state.doc.nodeAt(pos)!.attrs.level as number) % 6) + 1;
  return state.tr.setNodeAttribute(pos, 'level', level);
}

/// A random history of about `rounds` rounds: in each, one user edits the current document,
/// or (with `concurrency`) two users edit the same version and the second one's steps are
/// rebased over the first's, as the authority rebases a stale batch. `only` restricts the
/// authors to one user.
export function randomHistory(
  seed: number,
  rounds: number,
  options: { concurrency?: number; only?: string } = {},
): History {
  const random = new Random(seed);
  const typewriter = new Typewriter();
  const base = baseDoc(random, typewriter);
  const steps: HistoryStep[] = [];
  let doc = base;
  let at = 1_000;
  const record = (list: readonly Step[], user: string): void => {
    for (const step of list) steps.push({ step, user, clientID: `c-${user}`, at: at++ });
  };
  const pickUser = (): string => options.only ?? random.pick(users);
  for (let round = 0; round < rounds; round++) {
    const first = pickUser();
    const firstSteps = batch(doc, first, random, typewriter);
    if (random.chance(options.concurrency ?? 0)) {
      const second = pickUser();
      const secondSteps = batch(doc, second, random, typewriter);
      let after = doc;
      for (const step of firstSteps) after = step.apply(after).doc!;
      record(firstSteps, first);
      const rebased = rebaseSteps(
        secondSteps,
        firstSteps.map((step) => step.getMap()),
        after,
      );
      record(rebased.steps, second);
      doc = rebased.doc;
    } else {
      for (const step of firstSteps) doc = step.apply(doc).doc!;
      record(firstSteps, first);
    }
  }
  return { base, steps, head: doc };
}

/// One to three edits by `user`, one after another, starting from `doc`.
function batch(doc: Node, user: string, random: Random, typewriter: Typewriter): Step[] {
  let state = EditorState.create({ doc });
  const steps: Step[] = [];
  const count = random.int(1, 3);
  for (let i = 0; i < count; i++) {
    const tr = edit(state, user, random, typewriter);
    if (!tr) continue;
    steps.push(...tr.steps);
    state = state.apply(tr);
  }
  return steps;
}

/// The characters of `doc`'s text, each with its position.
export function characters(doc: Node): Map<string, number> {
  const found = new Map<string, number>();
  doc.descendants((node, pos) => {
    if (node.isText) for (let i = 0; i < node.text!.length; i++) found.set(node.text![i]!, pos + i);
    return true;
  });
  return found;
}

/// `fc.assert`, with the failing run's own error in the message: node:test prints an error's
/// message, not its cause, where fast-check puts it.
export function assertProperty<T extends unknown[]>(
  property: fc.IProperty<T>,
  params: fc.Parameters<T>,
): void {
  try {
    fc.assert(property, params);
  } catch (error) {
    const cause = (error as Error).cause;
    if (cause instanceof Error) (error as Error).message += `\n${cause.stack ?? cause.message}`;
    throw error;
  }
}
