import { Schema, type MarkSpec, type Node } from 'prosemirror-model';
import { marks as basicMarks, nodes as basicNodes } from 'prosemirror-schema-basic';
import { addListNodes } from 'prosemirror-schema-list';
import { isSafeImageUrl, isSafeLinkUrl } from './url.js';

/// Bumped whenever a change to the schema could make a stored document or step unreadable.
/// Snapshots record it so that a server can refuse (rather than corrupt) data written by
/// another schema.
export const schemaVersion = 1;

// Links open in a new context without a window.opener or a Referer: the document's author
// is not necessarily trusted by its reader.
const link: MarkSpec = {
  ...basicMarks.link,
  // Pasted HTML with an unsafe address keeps its text and loses the link, rather than making
  // the paste throw on the validator.
  parseDOM: [
    {
      tag: 'a[href]',
      getAttrs(dom: HTMLElement) {
        const href = dom.getAttribute('href');
        return href !== null && isSafeLinkUrl(href)
          ? { href, title: dom.getAttribute('title') }
          : false;
      },
    },
  ],
  attrs: {
    href: { validate: safeLinkUrl },
    title: { default: null, validate: stringOrNull('link title') },
  },
  toDOM(mark) {
    const { href, title } = mark.attrs;
    const safe = typeof href === 'string' && isSafeLinkUrl(href) ? href : null;
    return ['a', { href: safe, title, rel: 'noopener noreferrer nofollow' }, 0];
  },
};

const strike: MarkSpec = {
  parseDOM: [
    { tag: 's' },
    { tag: 'del' },
    { tag: 'strike' },
    { style: 'text-decoration', getAttrs: (value) => (value === 'line-through' ? null : false) },
  ],
  toDOM: () => ['s', 0],
};

/// Validators for attribute values. prosemirror-model runs them when a node or mark is made
/// from JSON and in `Node.check()`, so a step carrying a value no editor could have made (a
/// heading level 9, an object where a string belongs, a `javascript:` URL) is refused before
/// it is stored. Lengths are bounded by the server's configurable attribute limit, not here.
function stringOrNull(name: string): (value: unknown) => void {
  return (value) => {
    if (value !== null && typeof value !== 'string') {
      throw new RangeError(`${name} must be a string or null`);
    }
  };
}

// `Node.check()` runs validators on every node it visits, and one mark is shared by every text
// node it covers: bold-as-link over a whole document would scan the same long URL once per
// text node. The last URL found safe is remembered; `===` on the same string is a pointer test.
// Starts as a value no attribute can hold (JSON has no symbols): `null` would let a null href
// through on the first check.
const none = Symbol('none');
let lastSafeImage: string | symbol = none;
let lastSafeLink: string | symbol = none;

function safeImageUrl(value: unknown): void {
  if (value === lastSafeImage) return;
  if (typeof value !== 'string' || !isSafeImageUrl(value)) {
    throw new RangeError('image src must be an http(s), relative or data:image URL');
  }
  lastSafeImage = value;
}

function safeLinkUrl(value: unknown): void {
  if (value === lastSafeLink) return;
  if (typeof value !== 'string' || !isSafeLinkUrl(value)) {
    throw new RangeError('link href must be an http(s), mailto or relative URL');
  }
  lastSafeLink = value;
}

function wholeNumber(name: string, min: number, max: number): (value: unknown) => void {
  return (value) => {
    if (!Number.isInteger(value) || (value as number) < min || (value as number) > max) {
      throw new RangeError(`${name} must be a whole number from ${min} to ${max}`);
    }
  };
}

// Attributes are validated so that `Node.check()` refuses a document that no editor could
// have made (an AttrStep setting heading level 9, an image without a source).
const baseNodes = new Schema({ nodes: basicNodes, marks: {} }).spec.nodes
  .update('heading', {
    ...basicNodes.heading,
    attrs: {
      level: { default: 1, validate: wholeNumber('heading level', 1, 6) },
    },
  })
  .update('image', {
    ...basicNodes.image,
    // A pasted image with an unsafe source is left out, rather than making the paste throw.
    parseDOM: [
      {
        tag: 'img[src]',
        getAttrs(dom: HTMLElement) {
          const src = dom.getAttribute('src');
          if (src === null || !isSafeImageUrl(src)) return false;
          return { src, title: dom.getAttribute('title'), alt: dom.getAttribute('alt') };
        },
      },
    ],
    attrs: {
      src: { validate: safeImageUrl },
      alt: { default: null, validate: stringOrNull('image alt') },
      title: { default: null, validate: stringOrNull('image title') },
    },
  });

// The highest number an ordered list may start at.
const maxListOrder = 999_999_999;

// An `<ol>`'s `start` attribute as the list's `order`: read as browsers read it (leading
// digits, `2.5` is 2), 1 when absent or not a number, and brought into 0–`maxListOrder`.
function listStart(start: string | null): number {
  const order = start === null ? NaN : parseInt(start, 10);
  if (Number.isNaN(order)) return 1;
  return Math.min(Math.max(order, 0), maxListOrder);
}

// `addListNodes` gives the list nodes their content and group; the bare `orderedList` spec has
// neither, and updating with it alone would make ordered lists leaves outside `block`, which no
// editor could create and no stored document holding one could load.
const withLists = addListNodes(baseNodes, 'paragraph block*', 'block');

/// The one schema shared by the server, the browser editor and the simulator: paragraph,
/// headings 1–6, blockquote, code block, horizontal rule, hard break, image, bullet and ordered
/// lists with list items, and the marks strong, em, code, link and strike.
export const schema = new Schema({
  nodes: withLists.update('ordered_list', {
    ...withLists.get('ordered_list'),
    // prosemirror-schema-list takes `start` as it is (`+start`): a pasted `<ol start="x">` or a
    // start past the range would make a node the validator refuses, and the paste would throw
    // and be lost.
    parseDOM: [
      {
        tag: 'ol',
        getAttrs: (dom: HTMLElement) => ({ order: listStart(dom.getAttribute('start')) }),
      },
    ],
    attrs: { order: { default: 1, validate: wholeNumber('ordered list order', 0, maxListOrder) } },
  }),
  marks: {
    link,
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
