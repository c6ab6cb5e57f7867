import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  stat,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  DirectoryLockedError,
  lockFileName,
  lockRefreshMs,
  lockStaleAfterMs,
} from '../../../server/stores/file/directory_lock.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { StoreUnavailableError } from '../../../server/stores/store.js';
import { releaseReader, releaseWriter, wedge } from '../../support/fifo.js';
import { appendOf, reconstruct, snapshotOf, typingHistory } from '../../support/store_fixtures.js';
import { startServer } from '../../support/server.js';
import { delay } from '../../support/wait.js';

const tempDirs: string[] = [];
const history = typingHistory(20);
const epoch = 'epoch-1';

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-ops-file-'));
  tempDirs.push(dir);
  return dir;
}

/// A logger that keeps its warnings.
function recorder(): { warnings: string[]; warn(obj: object, msg: string): void } {
  const warnings: string[] = [];
  return { warnings, warn: (obj, msg) => warnings.push(`${msg} ${JSON.stringify(obj)}`) };
}

/// The one file under `dir` whose name starts with `prefix` and ends with `suffix`.
async function fileOf(dir: string, prefix: string, suffix: string): Promise<string> {
  const names = (await readdir(dir, { recursive: true })).filter((name) => {
    const base = name.split('/').pop()!;
    return base.startsWith(prefix) && base.endsWith(suffix);
  });
  assert.equal(names.length, 1, `one ${prefix}…${suffix} in ${names.join(', ')}`);
  return join(dir, names[0]!);
}

/// How long `promise` took to reject with StoreUnavailableError.
async function unavailableAfter(promise: Promise<unknown>): Promise<number> {
  const start = performance.now();
  await assert.rejects(promise, StoreUnavailableError);
  return performance.now() - start;
}

/// The pid of a process that has exited (and been reaped).
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await once(child, 'exit');
  return child.pid!;
}

async function writeLock(dir: string, holder: Record<string, unknown>): Promise<void> {
  await writeFile(
    join(dir, lockFileName),
    JSON.stringify({ startedAt: new Date().toISOString(), token: 'theirs', ...holder }),
  );
}

describe('FileStore directory lock', () => {
  it('refuses a second store on an open directory, naming it and the holder, until the first closes', async () => {
    const dir = await dataDir();
    const real = await realpath(dir);
    const first = new FileStore({ dataDir: dir });
    const lock = JSON.parse(await readFile(join(dir, lockFileName), 'utf8')) as {
      pid: number;
      hostname: string;
    };
    assert.equal(lock.pid, process.pid);
    assert.equal(lock.hostname, hostname());
    // However the directory is spelled.
    const alias = join(await dataDir(), 'alias');
    await symlink(dir, alias);
    for (const spelling of [dir, alias]) {
      assert.throws(
        () => new FileStore({ dataDir: spelling }),
        (error: unknown) =>
          error instanceof DirectoryLockedError &&
          error.message.includes(real) &&
          error.message.includes(`process ${process.pid}`),
      );
    }
    await first.append('kept', appendOf(history, epoch, 0, 2));
    await first.close();
    await assert.rejects(stat(join(dir, lockFileName)), { code: 'ENOENT' });
    const second = new FileStore({ dataDir: dir });
    assert.equal((await second.load('kept'))?.version, 2);
    await second.close();
  });

  it('refuses a directory locked by another live process', async (t) => {
    const dir = await dataDir();
    const child = spawn('sleep', ['30']);
    t.after(() => child.kill('SIGKILL'));
    await writeLock(dir, { pid: child.pid, hostname: hostname() });
    assert.throws(
      () => new FileStore({ dataDir: dir }),
      (error: unknown) =>
        error instanceof DirectoryLockedError && error.message.includes(`process ${child.pid}`),
    );
  });

  it('refuses a lock held on another host, and says which file to delete', async () => {
    const dir = await dataDir();
    await writeLock(dir, { pid: 1, hostname: 'elsewhere.example' });
    assert.throws(
      () => new FileStore({ dataDir: dir }),
      (error: unknown) =>
        error instanceof DirectoryLockedError &&
        error.message.includes('elsewhere.example') &&
        error.message.includes(join(dir, lockFileName)),
    );
  });

  it('takes over, with a warning, the lock of a dead process and one naming our pid from an earlier life', async () => {
    for (const pid of [await deadPid(), process.pid]) {
      const dir = await dataDir();
      await writeLock(dir, { pid, hostname: hostname() });
      const logger = recorder();
      const store = new FileStore({ dataDir: dir, logger });
      assert.equal(logger.warnings.length, 1);
      assert.match(logger.warnings[0]!, new RegExp(`lock of process ${pid}\\b`));
      const lock = JSON.parse(await readFile(join(dir, lockFileName), 'utf8')) as {
        token: string;
      };
      assert.notEqual(lock.token, 'theirs');
      await store.close();
    }
  });

  it('refuses a live lock from another PID namespace whatever its pid, until it is no longer refreshed', async () => {
    // Two containers sharing a host name and a volume, each server pid 1: from here, the
    // other's pid says nothing, ours included. Its refreshes say it is alive.
    const bootId = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
    for (const pid of [process.pid, 1]) {
      const dir = await dataDir();
      const path = join(dir, lockFileName);
      await writeLock(dir, {
        pid,
        hostname: hostname(),
        pidNamespace: 'pid:[1]',
        bootId,
      });
      assert.throws(
        () => new FileStore({ dataDir: dir }),
        (error: unknown) =>
          error instanceof DirectoryLockedError &&
          /another PID namespace/.test(error.message) &&
          error.message.includes(`process ${pid}`),
      );
      // Its holder stopped refreshing it: gone.
      const lapsed = new Date(Date.now() - lockStaleAfterMs - 1000);
      await utimes(path, lapsed, lapsed);
      const logger = recorder();
      const store = new FileStore({ dataDir: dir, logger });
      assert.match(logger.warnings.join('\n'), /another PID namespace or boot/);
      await store.close();
    }
  });

  it('refreshes its own lock while it holds the directory, and records where its pid means something', async (t) => {
    const dir = await dataDir();
    const path = join(dir, lockFileName);
    const store = new FileStore({ dataDir: dir });
    t.after(() => store.close());
    const lock = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
    assert.match(String(lock['pidNamespace']), /^pid:\[\d+\]$/);
    assert.equal(typeof lock['bootId'], 'string');
    const old = new Date(Date.now() - 60_000);
    await utimes(path, old, old);
    await delay(lockRefreshMs + 500);
    assert.ok(Date.now() - (await stat(path)).mtimeMs < lockRefreshMs + 500);
  });

  it(
    'keeps serving while a refresh of its lock hangs on the disk',
    { timeout: 20_000 },
    async () => {
      const dir = await dataDir();
      const path = join(dir, lockFileName);
      const store = new FileStore({ dataDir: dir });
      // The lock file becomes a FIFO: the next refresh's read hangs in open(2).
      const content = await wedge(path);
      try {
        // The event loop goes on through a refresh tick (a read on it would freeze it for good).
        const started = Date.now();
        await delay(lockRefreshMs + 500);
        assert.ok(Date.now() - started < lockRefreshMs + 1500);
        assert.deepEqual(await store.append('served', appendOf(typingHistory(2), 'e', 0, 2)), {
          ok: true,
          version: 2,
        });
      } finally {
        await releaseReader(path, content!, content!);
        await store.close();
      }
    },
  );

  it('takes over an unreadable lock file only once it is old enough not to be in the making', async () => {
    const dir = await dataDir();
    const path = join(dir, lockFileName);
    await writeFile(path, '');
    assert.throws(() => new FileStore({ dataDir: dir }), DirectoryLockedError);
    const minuteAgo = new Date(Date.now() - 60_000);
    await utimes(path, minuteAgo, minuteAgo);
    const logger = recorder();
    const store = new FileStore({ dataDir: dir, logger });
    assert.match(logger.warnings.join('\n'), /unreadable lock file/);
    await store.close();
  });

  it('removes temporary files left by a crash between write and rename when it opens', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('crashed', appendOf(history, epoch, 0, 3));
    await first.close();
    const state = await fileOf(dir, 'crashed.', '.state.json');
    // What a crash in the middle of an atomic state write leaves: the temp file, not renamed.
    await writeFile(`${state}.tmp`, '{"docId":"crashed","epo');
    await mkdir(join(dir, 'ff'), { recursive: true });
    await writeFile(join(dir, 'ff', 'other.state.json.tmp'), '');
    await writeFile(join(dir, 'ff', 'unrelated.txt'), 'kept');
    const logger = recorder();
    const second = new FileStore({ dataDir: dir, logger });
    const left = await readdir(dir, { recursive: true });
    assert.deepEqual(
      left.filter((name) => name.endsWith('.tmp')),
      [],
    );
    assert.ok(left.includes(join('ff', 'unrelated.txt')));
    assert.match(logger.warnings.join('\n'), /removed temporary files.*"removed":2/);
    assert.ok(reconstruct((await second.load('crashed'))!).eq(history.docs[3]!));
    await second.close();
  });
});

describe('FileStore timeouts (a hung disk: a FIFO in place of a file)', () => {
  it('a load that hangs rejects with unavailable in bounded time; other documents go on', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('hung', appendOf(history, epoch, 0, 2));
    await first.append('other', appendOf(history, epoch, 0, 3));
    await first.close();
    const state = await fileOf(dir, 'hung.', '.state.json');
    const content = (await wedge(state))!;

    const store = new FileStore({ dataDir: dir, timeoutMs: 300 });
    const elapsed = await unavailableAfter(store.load('hung'));
    assert.ok(elapsed >= 250 && elapsed < 1500, `rejected after ${elapsed} ms`);
    assert.equal(store.operationsInFlight, 1);
    assert.equal((await store.load('other'))?.version, 3);

    await releaseReader(state, content, content);
    assert.equal((await store.load('hung'))?.version, 2);
    assert.equal(store.operationsInFlight, 0);
    await store.close();
  });

  // The room's view: its append timed out (unavailable), it rewound and now appends again at
  // the same base version. The retry must wait for the stuck write and see what it did.
  for (const landed of [true, false]) {
    it(`an append that timed out and then ${landed ? 'landed' : 'failed'}: the retry at the same base ${landed ? 'gets conflict' : 'goes through'}, one entry per version`, async () => {
      const dir = await dataDir();
      const first = new FileStore({ dataDir: dir });
      await first.append('retry', appendOf(history, epoch, 0, 2));
      await first.close();
      // A fresh store reads the state file before its first append: that read hangs.
      const state = await fileOf(dir, 'retry.', '.state.json');
      const content = (await wedge(state))!;
      const store = new FileStore({ dataDir: dir, timeoutMs: 500 });

      await unavailableAfter(store.append('retry', appendOf(history, epoch, 2, 4)));
      const retry = store.append('retry', appendOf(history, epoch, 2, 3, 'client-b'));
      // Unstuck: the state file reads back whole (the stuck append goes on and writes), or as
      // garbage (it fails).
      await releaseReader(state, content, landed ? content : 'garbage');
      if (landed) {
        assert.deepEqual(await retry, { ok: false, reason: 'conflict', version: 4, epoch });
      } else {
        assert.deepEqual(await retry, { ok: true, version: 3 });
      }
      const stored = (await store.load('retry'))!;
      const end = landed ? 4 : 3;
      assert.equal(stored.version, end);
      assert.deepEqual(
        stored.journal.map((entry) => [entry.baseVersion, entry.steps.length]),
        [
          [0, 2],
          [2, end - 2],
        ],
      );
      assert.ok(reconstruct(stored).eq(history.docs[end]!));
      // Closing checkpoints the write-ahead log into the journal: one line per entry there.
      await store.close();
      const journal = await readFile(await fileOf(dir, 'retry.', '.0.journal'), 'utf8');
      assert.equal(journal.split('\n').length - 1, 2, 'two journal lines');
    });
  }

  it('an append whose time ran out before it started is never written', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('queued', appendOf(history, epoch, 0, 2));
    await first.close();
    const state = await fileOf(dir, 'queued.', '.state.json');
    const content = (await wedge(state))!;
    const store = new FileStore({ dataDir: dir, timeoutMs: 300 });

    const stuck = store.append('queued', appendOf(history, epoch, 2, 4));
    // Not in the same turn, which would put both in one write: queued behind the stuck one,
    // and given up on before it could start.
    await delay(50);
    const queued = store.append('queued', appendOf(history, epoch, 4, 5, 'client-b'));
    await unavailableAfter(stuck);
    await unavailableAfter(queued);
    await releaseReader(state, content, content);
    assert.deepEqual(await store.append('queued', appendOf(history, epoch, 4, 6)), {
      ok: true,
      version: 6,
    });
    const stored = (await store.load('queued'))!;
    assert.deepEqual(
      stored.journal.map((entry) => [entry.baseVersion, entry.clientIDs[0]]),
      [
        [0, 'client-a'],
        [2, 'client-a'],
        [4, 'client-a'],
      ],
    );
    assert.ok(reconstruct(stored).eq(history.docs[6]!));
    await store.close();
  });

  it('a snapshot that hangs rejects with unavailable; close gives up in bounded time and keeps the lock', async () => {
    const dir = await dataDir();
    const store = new FileStore({ dataDir: dir, timeoutMs: 300 });
    await store.append('snap', appendOf(history, epoch, 0, 4));
    const state = await fileOf(dir, 'snap.', '.state.json');
    // The atomic state write opens its temp file first: that open hangs.
    await wedge(`${state}.tmp`);
    const elapsed = await unavailableAfter(store.snapshot('snap', snapshotOf(history, epoch, 4)));
    assert.ok(elapsed >= 250 && elapsed < 1500, `rejected after ${elapsed} ms`);

    const closing = performance.now();
    await assert.rejects(store.close(), /still running/);
    assert.ok(performance.now() - closing < 1500);
    // A stuck write may still land: nobody else may open the directory meanwhile.
    assert.throws(() => new FileStore({ dataDir: dir }), DirectoryLockedError);
    assert.match(await releaseWriter(`${state}.tmp`), /"docId":"snap"/);
  });
});

describe('FileStore readiness', () => {
  it('/readyz answers 503 while the data directory is gone, and 200 once it is back', async (t) => {
    const dir = join(await dataDir(), 'data');
    const store = new FileStore({ dataDir: dir, timeoutMs: 500 });
    const server = await startServer({}, store);
    const ready = async () => {
      const response = await fetch(`${server.url}/readyz`);
      return [response.status, ((await response.json()) as { message?: string }).message];
    };
    t.after(() => server.close());
    assert.deepEqual(await ready(), [200, undefined]);
    // Moved away (a volume unmounted): nothing could be loaded or stored.
    await rename(dir, `${dir}.away`);
    assert.deepEqual(await ready(), [503, 'the store does not answer']);
    await rename(`${dir}.away`, dir);
    assert.deepEqual(await ready(), [200, undefined]);
    // Replaced by an empty directory: writable, but not the store's (its lock is gone).
    await rm(dir, { recursive: true });
    await mkdir(dir);
    assert.deepEqual(await ready(), [503, 'the store does not answer']);
  });
});
