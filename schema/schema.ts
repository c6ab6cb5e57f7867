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

// Attributes are validated so that `Node.check()` refuses a document that no editor could
// have made (an AttrStep setting heading level 9, an image without a source).
const baseNodes = new Schema({ nodes: basicNodes, marks: {} }).spec.nodes
  .update('heading', {
    ...basicNodes.heading,
    attrs: {
      level: {
        default: 1,
        validate: (value: unknown) => {
          if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > 6) {
            throw new RangeError('heading level must be 1–6');
          }
        },
      },
    },
  })
  .update('image', {
    ...basicNodes.image,
    attrs: {
      src: { validate: 'string' },
      alt: { default: null, validate: 'string|null' },
      title: { default: null, validate: 'string|null' },
    },
  });

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
