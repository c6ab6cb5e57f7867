import { getSchema } from '@tiptap/core';
import StarterKit from '@tiptap/starter-kit';

/// The editor's extensions, shared by the page and the server: the server checks every step
/// against the schema they make, so both must use the same list.
///
/// StarterKit's trailing-node extension is off: it appends a paragraph whenever the document
/// ends with something else, and with several editors each would append its own. Links do not
/// open on click: Tiptap opens them with `window.open(href, target)`, without `noopener`, so a
/// page linked by any collaborator would get `window.opener` and could send this tab elsewhere
/// (reverse tabnabbing).
export const extensions = [
  StarterKit.configure({ trailingNode: false, link: { openOnClick: false } }),
];

/// The ProseMirror schema of those extensions: what `createCollab` validates steps against.
export const schema = getSchema(extensions);
