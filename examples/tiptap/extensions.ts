import { getSchema } from '@tiptap/core';
import StarterKit from '@tiptap/starter-kit';

/// The editor's extensions, shared by the page and the server: the server checks every step
/// against the schema they make, so both must use the same list.
///
/// StarterKit's trailing-node extension is off: it appends a paragraph whenever the document
/// ends with something else, and with several editors each would append its own.
export const extensions = [StarterKit.configure({ trailingNode: false })];

/// The ProseMirror schema of those extensions: what `createCollab` validates steps against.
export const schema = getSchema(extensions);
