import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import ts from 'typescript';

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
});

// Size limits: a file past 500 lines holds two concepts, a function past 80 lines several steps
// that want names. Each exception says why it stands; an exception that no longer matches an
// offender fails too, so the list only shrinks.

const limitFolders = [...folders, 'deploy'];
const maxFileLines = 500;
const maxFunctionLines = 80;

/// Files allowed past `maxFileLines`, with the reason.
const longFiles: Record<string, string> = {
  'server/settings.ts': 'one table, a row per setting, read as data',
};

/// Functions allowed past `maxFunctionLines`, as `file#name` (see `functionName`), with the reason.
const longFunctions: Record<string, string> = {};

/// The name of a function-like node for the exceptions list: its own name, or the name of the
/// variable or property it is assigned to, or `(anonymous)`, prefixed by the names of the
/// functions around it (`attachProtocol/(anonymous)`).
function functionName(node: ts.Node, file: ts.SourceFile): string {
  const own = (fn: ts.Node): string => {
    const named = fn as ts.Node & { name?: ts.Node };
    if (named.name) return named.name.getText(file);
    if (ts.isConstructorDeclaration(fn)) return 'constructor';
    const parent = fn.parent;
    if (
      (ts.isVariableDeclaration(parent) ||
        ts.isPropertyAssignment(parent) ||
        ts.isPropertyDeclaration(parent)) &&
      parent.initializer === fn
    ) {
      return parent.name.getText(file);
    }
    return '(anonymous)';
  };
  const names = [own(node)];
  for (let up = node.parent; up; up = up.parent) {
    if (ts.isFunctionLike(up) && !ts.isFunctionTypeNode(up)) names.unshift(own(up));
  }
  return names.join('/');
}

/// Each function with a body in `file` and its length in lines, from its first token to its end.
function functionLengths(path: string, text: string): { name: string; lines: number }[] {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found: { name: string; lines: number }[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.end).line;
      found.push({ name: functionName(node, file), lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe('size limits', () => {
  const files = limitFolders.flatMap(sources).map((path) => {
    const text = readFileSync(join(root, path), 'utf8');
    return { path, text, lines: text.split('\n').length - (text.endsWith('\n') ? 1 : 0) };
  });

  it(`keeps every source file to ${maxFileLines} lines, but the listed ones`, () => {
    const over = files.filter((file) => file.lines > maxFileLines);
    const unlisted = over.filter((file) => !(file.path in longFiles));
    assert.deepEqual(
      unlisted.map((file) => `${file.path}: ${file.lines} lines`),
      [],
      'split these files by concept, or list one in longFiles with the reason it stands',
    );
    const stale = Object.keys(longFiles).filter((path) => !over.some((file) => file.path === path));
    assert.deepEqual(stale, [], 'these files are within the limit now: remove them from longFiles');
  });

  it(`keeps every function to ${maxFunctionLines} lines, but the listed ones`, () => {
    const over = files.flatMap((file) =>
      functionLengths(file.path, file.text)
        .filter((fn) => fn.lines > maxFunctionLines)
        .map((fn) => ({ key: `${file.path}#${fn.name}`, lines: fn.lines })),
    );
    assert.ok(files.length > 100, `${files.length} files`);
    const unlisted = over.filter((fn) => !(fn.key in longFunctions));
    assert.deepEqual(
      unlisted.map((fn) => `${fn.key}: ${fn.lines} lines`),
      [],
      'split these functions into named steps, or list one in longFunctions with the reason',
    );
    const stale = Object.keys(longFunctions).filter((key) => !over.some((fn) => fn.key === key));
    assert.deepEqual(stale, [], 'these functions are within the limit now: remove them');
  });
});
