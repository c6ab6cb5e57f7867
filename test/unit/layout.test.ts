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
      // The pure core: the authority and the checks, nothing with I/O, timers or a store.
      'server/core': [],
      'server/stores': [],
      // The rooms: the core made durable and shared through the store interface.
      'server/rooms': ['server/core', 'server/stores/store.ts'],
      'server/protocol': ['server/rooms', 'server/core', 'server/stores/store.ts'],
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
      // The authority is pure: no transport, no HTTP, no storage driver, no logger.
      'server/core': /^(socket\.io|express|redis|helmet|jose|pino|prom-client|node:)/,
      'server/rooms': /^(socket\.io|express|redis|helmet|jose)/,
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

  // Folders split to one concept per file; the others join this list as they are split.
  const sized = ['server/core/', 'server/rooms/'];

  it('keeps every source file of the split folders to 500 lines', () => {
    for (const file of files.keys()) {
      if (!sized.some((folder) => file.startsWith(folder))) continue;
      const lines = readFileSync(join(root, file), 'utf8').split('\n').length;
      assert.ok(lines <= 500, `${file} has ${lines} lines: it holds two concepts`);
    }
  });

  it('keeps every function of the split folders to 80 lines', () => {
    // Functions that stay longer, each with its reason.
    const exceptions: Record<string, string> = {};
    for (const file of files.keys()) {
      if (!sized.some((folder) => file.startsWith(folder))) continue;
      for (const { name, lines } of functionLengths(readFileSync(join(root, file), 'utf8'))) {
        if (lines <= 80 || exceptions[`${file}:${name}`]) continue;
        assert.fail(`${file}: ${name} has ${lines} lines (at most 80)`);
      }
    }
  });
});

const topLevelFunction = /^(?:export )?(?:async )?function\*? ?([A-Za-z_$][\w$]*)/;
const classMember =
  /^ {2}(?:(?:private|protected|public|static|async|get|set|readonly) )*([A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\(/;

/// The top-level functions and class methods of a prettier-formatted source, with their
/// lengths in lines: a declaration whose signature ends in `{` runs to the first line that
/// closes it at its own indent.
function functionLengths(text: string): { name: string; lines: number }[] {
  const lines = text.split('\n');
  const found: { name: string; lines: number }[] = [];
  let inClass = false;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (/^(?:export )?(?:abstract )?class /.test(line)) inClass = true;
    else if (line === '}') inClass = false;
    const match = topLevelFunction.exec(line) ?? (inClass ? classMember.exec(line) : null);
    if (!match) continue;
    const indent = line.startsWith(' ') ? '  ' : '';
    // The signature may span lines; an overload ends in `;`.
    let open = i;
    while (open < lines.length && !/\{$/.test(lines[open]!) && !/;$/.test(lines[open]!)) open++;
    if (open >= lines.length || !/\{$/.test(lines[open]!)) continue;
    let end = open + 1;
    while (end < lines.length && lines[end] !== `${indent}}`) end++;
    found.push({ name: match[1]!, lines: end - i + 1 });
  }
  return found;
}
