import type { Node } from 'prosemirror-model';
import type { EditorState, Transaction } from 'prosemirror-state';
import { canJoin, canSplit, findWrapping, liftTarget } from 'prosemirror-transform';
import type { Random } from './random.js';

/// The kinds of edit a simulated person makes, and how often (relative weights). Typing
/// dominates, as it does for people.
export const editMix = {
  type: 60,
  delete: 12,
  deleteAcrossBlocks: 3,
  enter: 8,
  join: 3,
  mark: 7,
  list: 3,
  heading: 4,
} as const;

export type EditKind = keyof typeof editMix;

const kinds = Object.keys(editMix) as EditKind[];
const totalWeight = kinds.reduce((sum, kind) => sum + editMix[kind], 0);
const words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'lorem', 'ipsum'];
const markNames = ['strong', 'em', 'code', 'strike', 'link'] as const;

/// The names a mark goes by: ours (prosemirror-schema-basic's), then Tiptap's. A schema with
/// none of them gets typing instead of that edit.
const markAliases: Record<(typeof markNames)[number], string[]> = {
  strong: ['strong', 'bold'],
  em: ['em', 'italic'],
  code: ['code'],
  strike: ['strike'],
  link: ['link'],
};

/// The first of `names` that `types` has.
function typeNamed<T>(types: Readonly<Record<string, T>>, names: readonly string[]): T | null {
  for (const name of names) if (types[name]) return types[name]!;
  return null;
}

/// Picks an edit kind by the weights of `editMix`.
export function pickKind(random: Random): EditKind {
  let roll = random.next() * totalWeight;
  for (const kind of kinds) {
    roll -= editMix[kind];
    if (roll < 0) return kind;
  }
  return 'type';
}

/// Makes one random edit to `state`, like a person would: typing a few characters, deleting,
/// pressing Enter, joining blocks, toggling a mark, making a list or a heading. Deterministic
/// for the random generator's state. Returns null when the picked edit does not fit the
/// document (the caller simply tries again later); a returned transaction always applies and
/// leaves a document that passes `check()`.
export function randomEdit(
  state: EditorState,
  random: Random,
  kind = pickKind(random),
): Transaction | null {
  const blocks = textblocks(state.doc);
  if (blocks.length === 0) return null;
  const block = random.pick(blocks);
  const tr = state.tr;
  const inside = block.pos + 1 + random.int(0, block.node.content.size);
  let outcome: EditOutcome = 'made';
  try {
    switch (kind) {
      case 'type': {
        if (block.node.type.spec.code && random.chance(0.5)) return null;
        const text = random.pick(words) + (random.chance(0.7) ? ' ' : '');
        tr.insertText(text, inside);
        break;
      }
      case 'delete': {
        const size = block.node.content.size;
        if (size === 0) return null;
        const from = block.pos + 1 + random.int(0, size - 1);
        const to = Math.min(block.pos + 1 + size, from + random.int(1, 6));
        tr.delete(from, to);
        break;
      }
      case 'deleteAcrossBlocks': {
        if (blocks.length < 2) return null;
        const index = random.int(0, blocks.length - 2);
        const a = blocks[index]!;
        const b = blocks[index + 1]!;
        const from = a.pos + 1 + random.int(0, a.node.content.size);
        const to = b.pos + 1 + random.int(0, b.node.content.size);
        tr.delete(from, to);
        break;
      }
      case 'enter': {
        if (!canSplit(state.doc, inside)) return null;
        tr.split(inside);
        break;
      }
      case 'join': {
        const candidates: number[] = [];
        state.doc.descendants((node, pos) => {
          if (node.isBlock && canJoin(state.doc, pos) && pos > 0) candidates.push(pos);
          return !node.isTextblock;
        });
        if (candidates.length === 0) return null;
        tr.join(random.pick(candidates));
        break;
      }
      case 'mark':
        outcome = markEdit(state, tr, block, random);
        break;
      case 'list':
        outcome = listEdit(state, tr, inside, random);
        break;
      case 'heading':
        outcome = headingEdit(state, tr, block, random);
        break;
    }
    if (outcome === 'no-fit') return null;
    if (outcome === 'type-instead') return randomEdit(state, random, 'type');
  } catch {
    // A transform that does not fit this document (prosemirror-transform throws for some
    // structural edits instead of refusing them): no edit this time.
    return null;
  }
  if (!tr.docChanged) return null;
  try {
    tr.doc.check();
  } catch {
    return null;
  }
  return tr;
}

/// What an edit helper did: made its edit into `tr`, found that it does not fit the document,
/// or found the schema without the types it needs (the caller types instead).
type EditOutcome = 'made' | 'no-fit' | 'type-instead';

/// Toggles a random mark over a few characters of `block`.
function markEdit(
  state: EditorState,
  tr: Transaction,
  block: Located,
  random: Random,
): EditOutcome {
  const size = block.node.content.size;
  if (size === 0) return 'no-fit';
  const from = block.pos + 1 + random.int(0, size - 1);
  const to = Math.min(block.pos + 1 + size, from + random.int(1, 12));
  const name = random.pick(markNames);
  const markType = typeNamed(state.schema.marks, markAliases[name]);
  if (!markType) return 'type-instead';
  const mark =
    name === 'link'
      ? markType.create({ href: `https://example.com/${random.int(1, 99)}` })
      : markType.create();
  if (state.doc.rangeHasMark(from, to, mark.type)) tr.removeMark(from, to, mark.type);
  else tr.addMark(from, to, mark);
  return 'made';
}

/// Lifts the block at `inside` out of its list, or wraps it in a bullet or ordered list.
function listEdit(
  state: EditorState,
  tr: Transaction,
  inside: number,
  random: Random,
): EditOutcome {
  const $pos = state.doc.resolve(inside);
  const range = $pos.blockRange();
  if (!range) return 'no-fit';
  const target = liftTarget(range);
  if ($pos.depth > 1 && target !== null && random.chance(0.5)) {
    tr.lift(range, target);
  } else {
    const listType = typeNamed(
      state.schema.nodes,
      random.chance(0.5) ? ['bullet_list', 'bulletList'] : ['ordered_list', 'orderedList'],
    );
    if (!listType) return 'type-instead';
    const wrapping = findWrapping(range, listType);
    if (!wrapping) return 'no-fit';
    tr.wrap(range, wrapping);
  }
  return 'made';
}

/// Makes `block` a heading of a random level, or a paragraph.
function headingEdit(
  state: EditorState,
  tr: Transaction,
  block: Located,
  random: Random,
): EditOutcome {
  const heading = typeNamed(state.schema.nodes, ['heading']);
  const paragraph = typeNamed(state.schema.nodes, ['paragraph']);
  if (!heading || !paragraph) return 'type-instead';
  const type = random.chance(0.7) ? heading : paragraph;
  const attrs = type === heading ? { level: random.int(1, 6) } : null;
  if (!block.node.isTextblock || block.node.type.spec.code) return 'no-fit';
  tr.setBlockType(block.pos, block.pos + block.node.nodeSize, type, attrs);
  return 'made';
}

interface Located {
  node: Node;
  pos: number;
}

function textblocks(doc: Node): Located[] {
  const found: Located[] = [];
  doc.descendants((node, pos) => {
    if (node.isTextblock) {
      found.push({ node, pos });
      return false;
    }
    return true;
  });
  return found;
}
