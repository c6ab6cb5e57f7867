import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import type { Schema } from 'prosemirror-model';
import { schema as builtIn } from '../schema/index.js';

/// The schema the simulated editors use: the built-in one, or the `schema` export of the ES
/// module `--schema` names (the host's schema, for a server embedded with `createCollab`).
/// Loaded in each thread, since a Schema cannot cross into a worker.
export async function loadSchema(moduleUrl: string | null): Promise<Schema> {
  if (moduleUrl === null) return builtIn;
  const loaded = (await import(moduleUrl)) as { schema?: unknown };
  const schema = loaded.schema as Schema | undefined;
  // Duck-typed: the module may bring its own copy of prosemirror-model.
  if (!schema || typeof schema.nodeFromJSON !== 'function' || !schema.topNodeType) {
    throw new TypeError(`${moduleUrl} does not export a ProseMirror Schema named "schema"`);
  }
  return schema;
}

/// The module path given on the command line, as a file URL (relative to the working
/// directory).
export function schemaModuleUrl(path: string): string {
  return pathToFileURL(resolve(path)).href;
}
