import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, describe, it } from 'node:test';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { StoreUnavailableError } from '../../../server/stores/store.js';
import { WriteAheadLog } from '../../../server/stores/file/write_ahead_log.js';
import { releaseWriter, wedge } from '../../support/fifo.js';
import { brokenWriterCommand } from '../../support/file_store_broken_writer.js';
import { appendOf, reconstruct, typingHistory } from '../../support/store_fixtures.js';
import { delay } from '../../support/wait.js';

// One document whose checkpoint keeps failing must not keep the whole write-ahead log: its
// pending entries are carried forward into the log, the files the checkpoint covered go, and
// nothing acknowledged is lost, whether the store is closed or killed meanwhile. The failures
// are made so that they hold as root too: a directory in a journal's place (every open fails
// with EISDIR) or a FIFO (a write that lands but whose fsync fails).

const tempDirs: string[] = [];
const steps = 240;
const history = typingHistory(steps);
const epoch = 'epoch-1';

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-checkpoint-failure-'));
  tempDirs.push(dir);
  return dir;
}

/// Polls `condition` every 10 ms for up to 10 s.
async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; !(await condition()); i++) {
    assert.ok(i < 1000, `${what} within 10 s`);
    await delay(10);
  }
}

/// The write-ahead log's files in `dir`, and their total size.
async function logFiles(dir: string): Promise<{ count: number; bytes: number }> {
  let count = 0;
  let bytes = 0;
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.wal')) continue;
    count++;
    // Up to the zeros written ahead of the rounds, which are room, not log.
    bytes += await readFile(join(dir, name)).then(
      (content) => (content.includes(0) ? content.indexOf(0) : content.length),
      // Deleted by a checkpoint between the listing and the read.
      () => 0,
    );
  }
  return { count, bytes };
}

/// The file of generation `generation` of `docId`'s journal.
async function journalOf(dir: string, docId: string, generation: number): Promise<string> {
  const names = await readdir(dir, { recursive: true });
  const state = names.find((name) => name.endsWith('.state.json') && name.includes(`${docId}.`));
  assert.ok(state, `${docId} has a state file`);
  return join(dir, state.replace(/\.state\.json$/, `.${generation}.journal`));
}

async function lineCount(path: string): Promise<number> {
  return (await readFile(path, 'utf8')).split('\n').length - 1;
}

/// A logger that keeps its warnings.
function recorder(): { messages: string[]; warn(obj: object, msg: string): void } {
  const messages: string[] = [];
  return { messages, warn: (obj, msg) => messages.push(`${msg} ${JSON.stringify(obj)}`) };
}

function count(messages: string[], pattern: RegExp): number {
  return messages.filter((message) => pattern.test(message)).length;
}

/// Makes 'sus' a document that can be read but not checkpointed. Appended to version 2 and
/// checkpointed; then a FIFO in its journal's place lets the next checkpoint's write go through
/// and fails its fsync (EINVAL), as a failed writeback would after the data reached the page
/// cache, and a directory at generation 1 makes the rewrite that this calls for fail for good.
/// Appends 2→4 meanwhile. Resolves with the journal's and the rewrite's paths, the journal's
/// content before, and what the failed checkpoint wrote.
async function unsyncedJournal(store: FileStore, dir: string) {
  await store.append('sus', appendOf(history, epoch, 0, 2));
  await until(async () => (await logFiles(dir)).count === 0, 'a checkpoint');
  const journal = await journalOf(dir, 'sus', 0);
  const rewrite = await journalOf(dir, 'sus', 1);
  await mkdir(rewrite);
  const content = (await wedge(journal))!;
  assert.deepEqual(await store.append('sus', appendOf(history, epoch, 2, 4)), {
    ok: true,
    version: 4,
  });
  await delay(100);
  const written = await releaseWriter(journal);
  return { journal, rewrite, content, written };
}

/// Opens `dir` and checks that each document holds at least its acknowledged version, and
/// nothing but the history up to where it stands.
async function assertKept(dir: string, acked: Map<string, number>): Promise<void> {
  const full = typingHistory(steps);
  const store = new FileStore({ dataDir: dir });
  try {
    for (const [docId, version] of acked) {
      const stored = await store.load(docId);
      assert.ok(stored, `${docId} exists`);
      assert.ok(stored.version >= version, `${docId}: ${stored.version} < acknowledged ${version}`);
      assert.ok(reconstruct(stored).eq(full.docs[stored.version]!), docId);
    }
  } finally {
    await store.close();
  }
}

describe('FileStore checkpoint failures', () => {
  it("keeps the log bounded while one document's checkpoint keeps failing, and checkpoints it once fixed", async () => {
    const dir = await dataDir();
    const logger = recorder();
    const options = { dataDir: dir, checkpointBytes: 2048, checkpointMs: 20, logger };
    const store = new FileStore(options);
    // A failed assertion must not leave it writing into the directory the hook removes.
    after(() => store.close());
    await store.append('broken', appendOf(history, epoch, 0, 2));
    await until(async () => (await logFiles(dir)).count === 0, 'a checkpoint');
    // Its journal's place taken by a directory: every checkpoint of it fails, root or not.
    const journal = await journalOf(dir, 'broken', 0);
    const content = await readFile(journal);
    await rm(journal);
    await mkdir(journal);
    // Accepted and acknowledged: the log holds it until a checkpoint can move it.
    assert.deepEqual(await store.append('broken', appendOf(history, epoch, 2, 4)), {
      ok: true,
      version: 4,
    });

    // Another document goes on appending, across many checkpoints (one every ~2 KB).
    let most = { count: 0, bytes: 0 };
    for (let version = 0; version < steps; version++) {
      const outcome = await store.append('busy', appendOf(history, epoch, version, version + 1));
      assert.equal(outcome.ok, true);
      const now = await logFiles(dir);
      most = { count: Math.max(most.count, now.count), bytes: Math.max(most.bytes, now.bytes) };
    }
    // The log holds at most: the carried file and the current one, and for a moment the next
    // checkpoint's pair. Before, every file since the first failure stayed (here over a
    // hundred, one more with every checkpoint).
    assert.ok(most.count <= 4, `at most ${most.count} log files`);
    assert.ok(most.bytes < 4 * 2048 + 4096, `at most ${most.bytes} bytes of log`);
    const failures = count(logger.messages, /checkpoint of a document failed/);
    assert.ok(failures >= 10, `${failures} failed checkpoints of 'broken'`);
    // Operators are told which document and why.
    assert.match(
      logger.messages.find((m) => m.includes('checkpoint of a document failed'))!,
      /"docId":"broken","err":"[^"]*EISDIR[^"]*","pending":1/,
    );
    // 'busy' reached its journal all along; only 'broken' waits, in the log.
    assert.ok((await lineCount(await journalOf(dir, 'busy', 0))) > steps / 2);

    // Fixed (the file is put back): the next checkpoint, which a failed one schedules,
    // moves 'broken' to its journal.
    await rm(journal, { recursive: true });
    await writeFile(journal, content);
    await until(async () => (await lineCount(journal)) === 2, "'broken' checkpointed");
    await until(async () => (await logFiles(dir)).count === 0, 'the log deleted');
    await store.close();
    await assertKept(
      dir,
      new Map([
        ['broken', 4],
        ['busy', steps],
      ]),
    );
  });

  it("refuses appends to a failing document once a checkpoint's worth of its entries waits, and takes them again once fixed", async () => {
    const dir = await dataDir();
    const store = new FileStore({ dataDir: dir, checkpointBytes: 2048, checkpointMs: 20 });
    after(() => store.close());
    const { journal, rewrite, content, written } = await unsyncedJournal(store, dir);
    // What the page cache shows after the failed sync: the lines are there.
    await writeFile(journal, Buffer.concat([content, Buffer.from(written)]));

    let version = 4;
    let refusal: unknown = null;
    while (version < steps && refusal === null) {
      await store.append('sus', appendOf(history, epoch, version, version + 1)).then(
        (outcome) => {
          assert.deepEqual(outcome, { ok: true, version: version + 1 });
          version++;
        },
        (error: unknown) => {
          refusal = error;
        },
      );
    }
    assert.ok(refusal instanceof StoreUnavailableError, `refused: ${String(refusal)}`);
    assert.match(refusal.message, /checkpoints of sus fail and \d+ bytes/);
    // About one checkpoint's worth (2 KB) of entries waits, far from the whole history.
    assert.ok(version < steps / 2, `refused only at ${version}`);
    // Nothing of the refused append was written; every acknowledged entry is still served;
    // other documents go on.
    assert.equal((await store.load('sus'))?.version, version);
    assert.deepEqual(await store.append('other', appendOf(history, epoch, 0, 1)), {
      ok: true,
      version: 1,
    });

    // Fixed: the next checkpoint (a failed one schedules it) writes the journal again, and
    // appends are taken again.
    await rm(rewrite, { recursive: true });
    await until(
      () =>
        store.append('sus', appendOf(history, epoch, version, version + 1)).then(
          (outcome) => outcome.ok,
          () => false,
        ),
      'an append taken again',
    );
    await store.close();
    await assertKept(
      dir,
      new Map([
        ['sus', version + 1],
        ['other', 1],
      ]),
    );
  });

  it('retries a failed checkpoint soon, not a whole checkpoint interval later', async () => {
    // Checkpoints come only by size here (the interval is a minute): once the failing
    // document is fixed and nothing else is written, only the retry moves its entries.
    const dir = await dataDir();
    const logger = recorder();
    const store = new FileStore({
      dataDir: dir,
      checkpointBytes: 2048,
      checkpointMs: 60_000,
      logger,
    });
    after(() => store.close());
    await store.append('broken', appendOf(history, epoch, 0, 2));
    const journal = await journalOf(dir, 'broken', 0);
    let busy = 0;
    const hasLines = () =>
      stat(journal).then(
        (stats) => stats.size > 0,
        () => false,
      );
    while (!(await hasLines())) {
      await store.append('busy', appendOf(history, epoch, busy, busy + 1));
      busy++;
      assert.ok(busy < steps, 'a checkpoint by size');
    }
    await rename(journal, `${journal}.saved`);
    await mkdir(journal);
    await store.append('broken', appendOf(history, epoch, 2, 4));
    while (count(logger.messages, /checkpoint of a document failed.*"docId":"broken"/) === 0) {
      await store.append('busy', appendOf(history, epoch, busy, busy + 1));
      busy++;
      assert.ok(busy < steps, 'a failed checkpoint by size');
      await delay(5);
    }
    await rm(journal, { recursive: true });
    await rename(`${journal}.saved`, journal);
    await until(async () => (await logFiles(dir)).count === 0, 'the retried checkpoint');
    await store.close();
    await assertKept(
      dir,
      new Map([
        ['broken', 4],
        ['busy', busy],
      ]),
    );
  });

  it('replays the carried entries at the next open after a close with the document still failing', async () => {
    const dir = await dataDir();
    const logger = recorder();
    const store = new FileStore({ dataDir: dir, checkpointBytes: 2048, checkpointMs: 20, logger });
    await store.append('broken', appendOf(history, epoch, 0, 2));
    await until(async () => (await logFiles(dir)).count === 0, 'a checkpoint');
    const journal = await journalOf(dir, 'broken', 0);
    await rename(journal, `${journal}.saved`);
    await mkdir(journal);
    await store.append('broken', appendOf(history, epoch, 2, 4));
    for (let version = 0; version < 60; version++)
      await store.append('busy', appendOf(history, epoch, version, version + 1));
    await until(
      async () => count(logger.messages, /carried forward.*"entries":1/) >= 3,
      'three carries',
    );
    // The close's checkpoint fails for 'broken' too, and the log stays for the next open.
    await store.close();
    assert.ok((await logFiles(dir)).count > 0);
    await rm(journal, { recursive: true });
    await rename(`${journal}.saved`, journal);
    await assertKept(
      dir,
      new Map([
        ['broken', 4],
        ['busy', 60],
      ]),
    );
  });

  it('keeps every acknowledged append through a SIGKILL between carrying entries forward and deleting the old files, and after', async () => {
    for (const killAtCarry of [true, false]) {
      const dir = await dataDir();
      const [command, ...args] = brokenWriterCommand({
        dataDir: dir,
        epoch,
        steps,
        killAtCarry,
      });
      const child = spawn(command!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const exited = once(child, 'exit');
      const acked = new Map<string, number>();
      let journal = '';
      for await (const line of createInterface({ input: child.stdout })) {
        const [key, value] = line.split(' ');
        if (key === 'done') break;
        if (key === 'journal') journal = value!;
        else acked.set(key!, Number(value));
        // Otherwise killed from here, a few checkpoints after the first carry.
        if (!killAtCarry && count(stderr.split('\n'), /carried forward/) >= 3) break;
      }
      child.kill('SIGKILL');
      const [code, signal] = await exited;
      assert.equal(signal, 'SIGKILL', `writer exited ${code}: ${stderr}`);
      assert.equal(acked.get('broken'), 4, stderr);
      assert.ok(journal !== '', stderr);
      if (killAtCarry) {
        // Killed with the carried copy durable and the files it replaces still there: the
        // log holds 'broken' 2→4 twice.
        const records = WriteAheadLog.recover(dir).records.filter((r) => r.docId === 'broken');
        assert.deepEqual(
          records.map((record) => record.entry.baseVersion),
          [2, 2],
        );
      } else {
        assert.ok(count(stderr.split('\n'), /carried forward/) >= 3, stderr);
      }
      // The disk fixed, the directory opens and replays.
      await rm(journal, { recursive: true });
      await rename(`${journal}.saved`, journal);
      await assertKept(dir, acked);
      const reopened = new FileStore({ dataDir: dir });
      const broken = (await reopened.load('broken'))!;
      assert.deepEqual(
        broken.journal.map((entry) => [entry.baseVersion, entry.steps.length]),
        [
          [0, 2],
          [2, 2],
        ],
      );
      await reopened.close();
    }
  });

  it('carries forward entries its journal shows after a failed sync, until the journal is written again', async () => {
    const dir = await dataDir();
    const logger = recorder();
    const store = new FileStore({ dataDir: dir, checkpointBytes: 1, checkpointMs: 50, logger });
    const { journal, rewrite, content, written } = await unsyncedJournal(store, dir);
    assert.match(written, /"baseVersion":2/);
    // What the page cache shows after such a failure: the lines are there. Whether they are
    // on the disk nobody knows; only the log surely holds them.
    await writeFile(journal, Buffer.concat([content, Buffer.from(written)]));
    const carries = (): number => count(logger.messages, /carried forward/);
    await until(async () => carries() >= 1, 'a carry');
    // Other appends, checkpoints (the second after the file was written surely read it): the
    // files that first held 'sus' 2→4 go.
    const before = carries();
    for (let version = 0; version < 20; version++)
      await store.append('other', appendOf(history, epoch, version, version + 1));
    await until(async () => carries() >= before + 2, 'two more carries');
    await store.close();
    // The crash that loses the page cache: the journal as the disk had it, and the disk fixed.
    await writeFile(journal, content);
    await rm(rewrite, { recursive: true });
    await assertKept(
      dir,
      new Map([
        ['sus', 4],
        ['other', 20],
      ]),
    );
  });
});
