import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';

// The package as a team installs it: `npm pack` of this repository (after the build), the
// tarball installed into a temporary host app with its own http + Socket.io server, its own
// schema and its own token check (test/fixtures/pack-host). What the host imports is only
// what the `exports` map and `files` list ship.

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../../', import.meta.url));
const fixtures = join(root, 'test', 'fixtures', 'pack-host');

/// Starts `node <script> ...args` in `cwd`; resolves with the child and a reader of its stdout
/// lines.
function start(cwd: string, args: string[]): { child: ChildProcess; line: () => Promise<string> } {
  const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  return {
    child,
    line: async () => {
      const next = await lines.next();
      if (next.done) throw new Error(`${args[0]} ended without a line`);
      return next.value;
    },
  };
}

describe('the packed package in a host app', () => {
  let dir: string;
  let hostDir: string;
  let host: ChildProcess | null = null;
  let url: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'scriptorium-pack-'));
    const { stdout } = await run(
      'npm',
      ['pack', '--ignore-scripts', '--json', '--pack-destination', dir],
      { cwd: root, maxBuffer: 16 * 1024 * 1024 },
    );
    const [packed] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
    // What ships: the library's code and types, not the tests, benchmarks or sources.
    const paths = packed!.files.map((file) => file.path);
    assert.ok(paths.includes('dist/server/index.js') && paths.includes('dist/server/index.d.ts'));
    assert.ok(paths.includes('dist/client/index.d.ts') && paths.includes('dist/schema/index.js'));
    assert.ok(!paths.some((path) => /^(dist\/test|dist\/bench|server\/|test\/)/.test(path)));
    hostDir = join(dir, 'host');
    await mkdir(hostDir);
    await writeFile(
      join(hostDir, 'package.json'),
      JSON.stringify({
        name: 'host-app',
        private: true,
        type: 'module',
        dependencies: { scriptorium: `file:../${packed!.filename}` },
      }),
    );
    for (const file of await readdir(fixtures)) {
      await copyFile(join(fixtures, file), join(hostDir, file));
    }
    // From the npm cache `npm ci` filled (the registry only for what it lacks).
    await run(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'],
      {
        cwd: hostDir,
        maxBuffer: 16 * 1024 * 1024,
      },
    );
    const started = start(hostDir, ['host.mjs']);
    host = started.child;
    const first = await started.line();
    const port = /^listening (\d+)$/.exec(first)?.[1];
    assert.ok(port, first);
    url = `http://127.0.0.1:${port}`;
  });

  after(async () => {
    if (host && host.exitCode === null) {
      const exited = new Promise((resolve) => host!.once('exit', resolve));
      host.kill('SIGTERM');
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  });

  it("type-checks the README's embedding example under strict against the shipped types", async () => {
    const readme = await readFile(join(root, 'README.md'), 'utf8');
    const from = readme.indexOf('\n## Use it in your app\n');
    const example = /```ts\n([\s\S]*?)```/.exec(readme.slice(from))?.[1];
    assert.ok(from >= 0 && example?.includes('createCollab'), 'the example');
    // What the example leaves to the host: its schema module, sessions, app and logger.
    const checkDir = join(hostDir, 'readme-example');
    await mkdir(checkDir);
    await writeFile(
      join(checkDir, 'my-schema.ts'),
      "import { Schema } from 'prosemirror-model';\n" +
        "export const schema = new Schema({ nodes: { doc: { content: 'paragraph+' }, " +
        "paragraph: { content: 'text*' }, text: {} } });\n",
    );
    await writeFile(
      join(checkDir, 'app.ts'),
      example +
        'declare const mySessions: { verify(token: unknown): Promise<{ userId: string; ' +
        'canOpen(docId: string): boolean; canEdit(docId: string): boolean }> };\n' +
        "declare const myApp: import('node:http').RequestListener;\n" +
        "declare const logger: import('pino').Logger;\n",
    );
    await writeFile(
      join(checkDir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(root, 'node_modules', '@types')],
        },
        files: ['app.ts', 'my-schema.ts'],
      }),
    );
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    try {
      await run(process.execPath, [tsc, '-p', checkDir], { cwd: checkDir });
    } catch (err) {
      assert.fail(`tsc: ${(err as { stdout?: string }).stdout ?? String(err)}`);
    }
  });

  it('ships types and code for each entry point', async () => {
    const installed = join(hostDir, 'node_modules', 'scriptorium');
    const { exports } = JSON.parse(await readFile(join(installed, 'package.json'), 'utf8')) as {
      exports: Record<string, { types: string; default: string } | string>;
    };
    for (const [entry, target] of Object.entries(exports)) {
      if (typeof target === 'string') continue;
      await stat(join(installed, target.types));
      await stat(join(installed, target.default));
      assert.ok(entry === '.' || entry.startsWith('./'), entry);
    }
    assert.ok('./protocol' in exports, 'the protocol entry');
    // The host resolves the protocol entry by its package name.
    const { stdout } = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const { errors } = await import('scriptorium/protocol'); console.log(Object.keys(errors).length > 0)",
      ],
      { cwd: hostDir },
    );
    assert.equal(stdout.trim(), 'true');
  });

  it('refuses a client without the token; four editors with the host schema converge; onAccepted saw every step; change reaches the editors', async (t) => {
    const editors = start(hostDir, ['editors.mjs', url, 'shared', 'from the host']);
    t.after(() => editors.child.kill());
    assert.equal(await editors.line(), 'typed');
    const change = await fetch(
      `${url}/change?doc=shared&text=${encodeURIComponent('from the host')}`,
      {
        method: 'POST',
      },
    );
    const { version } = (await change.json()) as { version: number };
    const result = JSON.parse(await editors.line()) as {
      refused: string;
      docs: unknown[];
      versions: number[];
    };
    assert.equal(result.refused, 'unauthorized');
    const served = (await (await fetch(`${url}/document?doc=shared`)).json()) as {
      version: number;
      doc: { content: { type: string }[] };
    };
    assert.equal(served.version, version);
    for (const doc of result.docs) assert.deepEqual(doc, served.doc);
    assert.ok(
      served.doc.content.some((node) => node.type === 'callout'),
      'the callout',
    );
    const text = JSON.stringify(served.doc);
    for (let i = 0; i < 4; i++) {
      for (let round = 0; round < 10; round++) assert.ok(text.includes(`${i}${round} `));
    }
    assert.ok(text.includes('from the host'));
    const accepted = (await (await fetch(`${url}/accepted`)).json()) as {
      docId: string;
      version: number;
      steps: number;
      user: string | null;
    }[];
    // Every version from 1 to the last, each reached by one accepted batch, in order.
    let at = 0;
    for (const event of accepted) {
      assert.equal(event.version, at + event.steps, JSON.stringify(event));
      at = event.version;
    }
    assert.equal(at, served.version);
    const users = new Set(accepted.map((event) => event.user));
    for (let i = 0; i < 4; i++) assert.ok(users.has(`user-editor-${i}`));
    assert.ok(users.has(null), 'the server-side change has no user');
  });
});
