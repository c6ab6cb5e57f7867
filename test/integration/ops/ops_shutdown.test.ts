import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { CollabClient } from '../../../client/index.js';
import { lockFileName } from '../../../server/stores/file/directory_lock.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { parseStateText } from '../../../server/stores/file/format.js';
import { Random, editRandomly, openEditor } from '../../support/editors.js';
import { wedge } from '../../support/fifo.js';
import { runServerProcess, startServerProcess, type ServerProcess } from '../../support/process.js';
import { waitFor } from '../../support/wait.js';

const tempDirs: string[] = [];

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-ops-shutdown-'));
  tempDirs.push(dir);
  return dir;
}

/// A file-store server on `dir` that snapshots only when told to stop. REDIS_URL is emptied
/// in case the test run has one set.
function fileEnv(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    REDIS_URL: '',
    DATA_DIR: dir,
    SNAPSHOT_EVERY_STEPS: '1000000',
    SNAPSHOT_EVERY_MS: '86400000',
    ...extra,
  };
}

/// The one file under `dir` of document `docId` whose name ends with `suffix`.
async function fileOf(dir: string, docId: string, suffix: string): Promise<string> {
  const names = (await readdir(dir, { recursive: true })).filter((name) => {
    const base = name.split('/').pop()!;
    return base.startsWith(`${docId}.`) && base.endsWith(suffix);
  });
  assert.equal(names.length, 1, `one ${docId}…${suffix} in ${names.join(', ')}`);
  return join(dir, names[0]!);
}

/// Opens an editor on each document, makes a few edits and waits until all are stored.
async function editAndSettle(server: ServerProcess, docIds: string[]): Promise<CollabClient[]> {
  const editors = docIds.map((docId) => openEditor(server.url, docId));
  await Promise.all(editors.map((editor) => editor.ready()));
  await Promise.all(editors.map((editor, i) => editRandomly(editor, new Random(i + 1), 10, 5)));
  await waitFor(
    () => editors.every((editor) => editor.status === 'synced' && !editor.hasUnconfirmed),
    'edits to be stored',
  );
  return editors;
}

/// Stops `server` with SIGTERM; resolves with how it exited and how long it took.
async function terminate(server: ServerProcess): Promise<{ exit: number | string; ms: number }> {
  const start = performance.now();
  const exit = await server.stop('SIGTERM');
  return { exit, ms: performance.now() - start };
}

describe('operations: lock, shutdown (server child processes, file store)', () => {
  it('a second server on the same data directory exits 1 at start, naming it and the holder', async () => {
    const dir = await dataDir();
    const first = await startServerProcess(fileEnv(dir));
    try {
      const second = await runServerProcess(fileEnv(dir));
      assert.equal(second.exit, 1, second.output);
      assert.match(second.output, new RegExp(`data directory ${await realpath(dir)} is in use`));
      assert.match(second.output, new RegExp(`process ${first.child.pid}\\b`));
    } finally {
      assert.equal(await first.stop('SIGTERM'), 0, first.output());
    }
    // A clean stop releases the lock: the next server starts without taking anything over.
    await assert.rejects(stat(join(dir, lockFileName)), { code: 'ENOENT' });
    const third = await startServerProcess(fileEnv(dir));
    assert.equal(await third.stop('SIGTERM'), 0);
    assert.doesNotMatch(third.output(), /taking over/);
  });

  it('SIGTERM with a document wedged on a hung disk: exits within SHUTDOWN_TIMEOUT_MS, failed; the other document is saved', async (t) => {
    const dir = await dataDir();
    const shutdownTimeoutMs = 1500;
    // The store's own timeout is far longer: only the shutdown budget can end this.
    const server = await startServerProcess(
      fileEnv(dir, { SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs), STORE_TIMEOUT_MS: '60000' }),
    );
    let editors: CollabClient[] = [];
    try {
      editors = await editAndSettle(server, ['wedged', 'fine']);
      // Nothing snapshotted yet: the shutdown has both documents to save.
      for (const docId of ['wedged', 'fine']) {
        const state = await fileOf(dir, docId, '.state.json');
        assert.equal(parseStateText(await readFile(state, 'utf8'), state).snapshot, null);
      }
      // The snapshot of 'wedged' opens its next journal generation first: that open hangs.
      await wedge(
        (await fileOf(dir, 'wedged', '.state.json')).replace(/state\.json$/, '1.journal'),
      );
      const { exit, ms } = await terminate(server);
      assert.ok(ms < shutdownTimeoutMs + 1000, `exited after ${ms} ms`);
      // A thread stuck in open(2) would hold process.exit forever: the server kills itself.
      assert.equal(exit, 'SIGKILL', server.output());
      assert.match(server.output(), /not every document could be saved/);
      assert.match(server.output(), /still stuck; exiting with SIGKILL/);
    } finally {
      for (const editor of editors) editor.close();
      await server.stop('SIGKILL');
    }
    const warnings: string[] = [];
    const store = new FileStore({ dataDir: dir, logger: { warn: (_, msg) => warnings.push(msg) } });
    t.after(() => store.close());
    assert.match(warnings.join('\n'), new RegExp(`lock of process ${server.child.pid}\\b`));
    const fine = (await store.load('fine'))!;
    assert.ok(fine.version > 0);
    assert.equal(fine.snapshot?.version, fine.version, 'the shutdown snapshot of fine');
    const wedged = (await store.load('wedged'))!;
    assert.equal(wedged.version, editors[0]!.version, 'every step of wedged is journaled');
    assert.equal(wedged.snapshot, null);
  });

  it('SIGTERM when a document cannot be saved (an error, not a hang): exits 1 at once; the other document is saved', async (t) => {
    const dir = await dataDir();
    const server = await startServerProcess(fileEnv(dir, { SHUTDOWN_TIMEOUT_MS: '5000' }));
    let editors: CollabClient[] = [];
    try {
      editors = await editAndSettle(server, ['broken', 'fine']);
      // A directory where the snapshot's journal file goes: open(2) fails with EISDIR.
      await mkdir(
        (await fileOf(dir, 'broken', '.state.json')).replace(/state\.json$/, '1.journal'),
      );
      const { exit, ms } = await terminate(server);
      assert.equal(exit, 1, server.output());
      assert.ok(ms < 3000, `exited after ${ms} ms`);
    } finally {
      for (const editor of editors) editor.close();
      await server.stop('SIGKILL');
    }
    const store = new FileStore({ dataDir: dir });
    t.after(() => store.close());
    const fine = (await store.load('fine'))!;
    assert.equal(fine.snapshot?.version, fine.version);
    assert.equal((await store.load('broken'))?.version, editors[0]!.version);
  });
});
