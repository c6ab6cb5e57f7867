import type { Node } from 'prosemirror-model';

// A document read as a stream of pieces, what `differenceMap` compares.

/// A piece of a document read as a stream: a container's start or end token, or a textblock
/// or leaf block whole.
export interface Piece {
  /// The block, or the container whose token this is (never a textblock).
  node: Node;
  /// Its position, and how many positions it takes (1 for a token).
  pos: number;
  size: number;
  /// Equal for pieces that are the same: the whole block's JSON, or a token's markup.
  key: string;
  /// A textblock's text, read when first compared.
  text: string | null;
}

/// The pieces of `doc` in document order: a token for each end of every container, and each
/// textblock or leaf block whole.
export function pieces(doc: Node): Piece[] {
  const list: Piece[] = [];
  const walk = (parent: Node, start: number) => {
    parent.forEach((node, offset) => {
      const pos = start + offset;
      if (node.isTextblock || node.isLeaf) {
        list.push({
          node,
          pos,
          size: node.nodeSize,
          key: JSON.stringify(node.toJSON()),
          text: null,
        });
        return;
      }
      const markup = { type: node.type.name, attrs: node.attrs, marks: node.marks };
      list.push({
        node,
        pos,
        size: 1,
        key: `<${JSON.stringify(markup)}`,
        text: null,
      });
      walk(node, pos + 1);
      const end = pos + node.nodeSize - 1;
      list.push({ node, pos: end, size: 1, key: `>${node.type.name}`, text: null });
    });
  };
  walk(doc, 0);
  return list;
}

/// Whether the piece is a textblock (not a token or a leaf block).
export function isTextblock(piece: Piece): boolean {
  return piece.node.isTextblock;
}

/// The indices of the pieces that are textblocks with content: the anchors. A leaf block (a
/// rule) is compared with the tokens between them: matched with a textblock's weight, a rule
/// moved past a paragraph could be kept in place of the paragraph, and the paragraph taken as
/// replaced. So is an empty textblock: all are alike, and one matched with another far from it
/// would cut the stretches around it in the wrong places (a paragraph split there taken for
/// deleted text and new text).
export function textblockIndices(list: Piece[]): number[] {
  const indices: number[] = [];
  for (let i = 0; i < list.length; i++) {
    if (isTextblock(list[i]!) && list[i]!.node.content.size > 0) indices.push(i);
  }
  return indices;
}

/// Whether two lists of pieces are the same, piece for piece.
export function sameKeys(a: Piece[], b: Piece[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.key !== b[i]!.key) return false;
  return true;
}

/// A textblock's text, read once and kept in the piece.
export function blockText(piece: Piece): string {
  return (piece.text ??= piece.node.textContent);
}

/// How many positions the piece takes.
export function pieceSize(piece: Piece): number {
  return piece.size;
}

/// The size of `count` items of `list` from `from`.
export function sizeOf<T>(
  list: readonly T[],
  from: number,
  count: number,
  size: (item: T) => number,
): number {
  let total = 0;
  for (let i = from; i < from + count; i++) total += size(list[i]!);
  return total;
}
