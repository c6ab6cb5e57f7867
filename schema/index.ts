// `scriptorium/schema`: the built-in ProseMirror schema, and the URL checks its links and images
// make (for a host's own schema). The wire types and error codes are `scriptorium/protocol`;
// rebasing and size measurement are internal.
export { emptyDoc, schema, schemaVersion } from './schema.js';
export { isSafeImageUrl, isSafeLinkUrl } from './url.js';
