// `scriptorium/schema`: the built-in ProseMirror schema, nothing else. The wire types and error
// codes are `scriptorium/protocol`; rebasing and size measurement are internal.
export { emptyDoc, schema, schemaVersion } from './schema.js';
