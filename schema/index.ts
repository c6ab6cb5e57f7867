export * from './schema.js';
export * from './errors.js';
export * from './events.js';
export * from './rebase.js';
export * from './doc_size.js';
export * from './json_limits.js';
export * from './url.js';
