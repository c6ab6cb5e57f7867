import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

// The layout is the architecture: these checks read the TypeScript sources (not the build) and
// fail when a change breaks it. Type-only imports count: a cycle of types is still a cycle a
// reader has to untangle.

const root = fileURLToPath(new URL('../../../', import.meta.url));
const folders = ['server', 'schema', 'client', 'metrics', 'client-sim', 'web', 'bench', 'examples'];

/// Every `.ts` file under `dir`, as paths relative to the repository root.
function sources(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

const importPattern =
  /(?:^|\n)\s*(?:import|export)[^'";]*?from\s*'([^']+)'|import\(\s*'([^']+)'\s*\)/g;

/// The relative imports of each file, resolved to repository paths, and its package imports.
function graph(): Map<string, { local: string[]; packages: string[] }> {
  const files = new Map<string, { local: string[]; packages: string[] }>();
  for (const file of folders.flatMap(sources)) {
    const text = readFileSync(join(root, file), 'utf8');
    const local: string[] = [];
    const packages: string[] = [];
    for (const match of text.matchAll(importPattern)) {
      const spec = (match[1] ?? match[2])!;
      if (spec.startsWith('.')) {
        local.push(relative(root, resolve(root, dirname(file), spec.replace(/\.js$/, '.ts'))));
      } else {
        packages.push(spec);
      }
    }
    files.set(file, { local, packages });
  }
  return files;
}

describe('source layout', () => {
  const files = graph();

  it('finds the sources and resolves every relative import to a file', () => {
    assert.ok(files.size > 80, `${files.size} files`);
    for (const [file, { local }] of files) {
      for (const target of local) {
        assert.ok(files.has(target), `${file} imports ${target}, which is not a source file`);
      }
    }
  });

  it('has no import cycles', () => {
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const visit = (file: string): void => {
      if (state.get(file) === 'done') return;
      if (state.get(file) === 'open') {
        const cycle = [...stack.slice(stack.indexOf(file)), file];
        assert.fail(`import cycle: ${cycle.join(' → ')}`);
      }
      state.set(file, 'open');
      stack.push(file);
      for (const target of files.get(file)?.local ?? []) visit(target);
      stack.pop();
      state.set(file, 'done');
    };
    for (const file of files.keys()) visit(file);
  });

  it('keeps each layer to the layers below it', () => {
    // What each server folder may import, besides itself, schema/ and metrics/.
    const allowed: Record<string, string[]> = {
      'server/core': ['server/stores/store.ts'],
      'server/stores': [],
      'server/protocol': ['server/core', 'server/stores/store.ts'],
      // The standalone app is built from the package's public entry (server/index.ts), its
      // own configuration, and the token and origin checks it shares with the protocol.
      'server/app': [
        'server/index.ts',
        'server/config.ts',
        'server/settings.ts',
        'server/protocol/auth.ts',
        'server/protocol/origins.ts',
        'server/protocol/socket.ts',
      ],
    };
    const forbiddenPackages: Record<string, RegExp> = {
      // The authority is pure: no transport, no HTTP, no storage driver.
      'server/core': /^(socket\.io|express|redis|helmet|jose)/,
      'server/stores': /^(socket\.io|express|helmet|jose)/,
      'server/protocol': /^(express|redis|helmet)/,
    };
    for (const [file, { local, packages }] of files) {
      const layer = Object.keys(allowed).find((folder) => file.startsWith(`${folder}/`));
      if (!layer) continue;
      for (const target of local) {
        const ok =
          target.startsWith(`${layer}/`) ||
          target.startsWith('schema/') ||
          target.startsWith('metrics/') ||
          allowed[layer]!.some((prefix) => target === prefix || target.startsWith(`${prefix}/`));
        assert.ok(ok, `${file} (${layer}) imports ${target}`);
      }
      for (const name of packages) {
        assert.doesNotMatch(name, forbiddenPackages[layer] ?? /$^/, `${file} imports ${name}`);
      }
    }
  });

  it('keeps the file store behind its facade', () => {
    // Its parts (queue, format, checkpointer…) are free to change: outside server/stores/file/
    // sources see only FileStore and its options.
    const facade = 'server/stores/file/file_store.ts';
    for (const [file, { local }] of files) {
      if (file.startsWith('server/stores/file/')) continue;
      for (const target of local) {
        if (!target.startsWith('server/stores/file/')) continue;
        assert.equal(target, facade, `${file} imports ${target}`);
      }
    }
  });
});
