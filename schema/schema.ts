import { Schema, type MarkSpec, type Node } from 'prosemirror-model';
import { marks as basicMarks, nodes as basicNodes } from 'prosemirror-schema-basic';
import { addListNodes } from 'prosemirror-schema-list';

/// Bumped whenever a change to the schema could make a stored document or step unreadable.
/// Snapshots record it so that a server can refuse (rather than corrupt) data written by
/// another schema.
export const schemaVersion = 1;

const strike: MarkSpec = {
  parseDOM: [
    { tag: 's' },
    { tag: 'del' },
    { tag: 'strike' },
    { style: 'text-decoration', getAttrs: (value) => (value === 'line-through' ? null : false) },
  ],
  toDOM: () => ['s', 0],
};

const baseNodes = new Schema({ nodes: basicNodes, marks: {} }).spec.nodes;

/// The one schema shared by the server, the browser editor and the simulator: paragraph,
/// headings 1–6, blockquote, code block, horizontal rule, hard break, image, bullet and ordered
/// lists with list items, and the marks strong, em, code, link and strike.
export const schema = new Schema({
  nodes: addListNodes(baseNodes, 'paragraph block*', 'block'),
  marks: {
    link: basicMarks.link,
    em: basicMarks.em,
    strong: basicMarks.strong,
    code: basicMarks.code,
    strike,
  },
});

/// The document a new document id starts with: one empty paragraph.
export function emptyDoc(): Node {
  return schema.node('doc', null, [schema.node('paragraph')]);
}
