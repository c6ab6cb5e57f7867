import assert from 'node:assert/strict';
import { appendFile, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FileStore } from '../../server/stores/file_store.js';
import { appendOf, reconstruct, snapshotOf, typingHistory } from '../support/store_fixtures.js';

const tempDirs: string[] = [];
const history = typingHistory(40);
const epoch = 'epoch-1';

after(async () => {
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'scriptorium-file-store-'));
  tempDirs.push(dir);
  return dir;
}

/// Every file under `dir` whose name ends with `suffix`.
async function filesEndingWith(dir: string, suffix: string): Promise<string[]> {
  const names = await readdir(dir, { recursive: true });
  return names.filter((name) => name.endsWith(suffix)).map((name) => join(dir, name));
}

describe('FileStore', () => {
  it('keeps documents across store instances on one directory', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('notes', appendOf(history, epoch, 0, 5));
    await first.snapshot('notes', snapshotOf(history, epoch, 3));
    await first.append('notes', appendOf(history, epoch, 5, 9));
    const before = await first.load('notes');
    await first.close();

    const second = new FileStore({ dataDir: dir });
    const after = await second.load('notes');
    assert.deepEqual(after, before);
    assert.ok(reconstruct(after!).eq(history.docs[9]!));
    // The compare-and-set state was read back too.
    assert.deepEqual(await second.append('notes', appendOf(history, epoch, 5, 6)), {
      ok: false,
      reason: 'conflict',
      version: 9,
      epoch,
    });
    assert.deepEqual(await second.append('notes', appendOf(history, epoch, 9, 10)), {
      ok: true,
      version: 10,
    });
    await second.close();
  });

  it('drops and truncates a torn last journal line', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('torn', appendOf(history, epoch, 0, 2));
    await first.append('torn', appendOf(history, epoch, 2, 4));
    await first.close();
    const [journal] = await filesEndingWith(dir, '.journal');
    assert.ok(journal);
    // What a crash in the middle of writing a third entry leaves behind.
    await appendFile(journal, '{"baseVersion":4,"steps":[{"stepType":"repl');

    const second = new FileStore({ dataDir: dir });
    const stored = await second.load('torn');
    assert.equal(stored?.version, 4);
    assert.equal(stored?.journal.length, 2);
    assert.ok((await readFile(journal, 'utf8')).endsWith('}\n'));
    assert.deepEqual(await second.append('torn', appendOf(history, epoch, 4, 6)), {
      ok: true,
      version: 6,
    });
    await second.close();

    const third = new FileStore({ dataDir: dir });
    assert.ok(reconstruct((await third.load('torn'))!).eq(history.docs[6]!));
    await third.close();
  });

  it('refuses to load a journal corrupt before its last line', async () => {
    const dir = await dataDir();
    const store = new FileStore({ dataDir: dir });
    await store.append('corrupt', appendOf(history, epoch, 0, 2));
    await store.close();
    const [journal] = await filesEndingWith(dir, '.journal');
    await writeFile(journal!, 'not json\n' + (await readFile(journal!, 'utf8')));
    const reopened = new FileStore({ dataDir: dir });
    // Damaged, not unavailable: retrying cannot help, and the server quarantines it.
    await assert.rejects(reopened.load('corrupt'), { name: 'TypeError' });
    await reopened.close();
  });

  it('ignores a journal generation left by a crash before its snapshot was recorded', async () => {
    const dir = await dataDir();
    const first = new FileStore({ dataDir: dir });
    await first.append('gen', appendOf(history, epoch, 0, 4));
    await first.close();
    const [journal] = await filesEndingWith(dir, '.0.journal');
    // A crash after writing generation 1 but before the state file named it.
    await writeFile(journal!.replace(/\.0\.journal$/, '.1.journal'), 'garbage\n');

    const second = new FileStore({ dataDir: dir });
    assert.ok(reconstruct((await second.load('gen'))!).eq(history.docs[4]!));
    assert.deepEqual(await second.snapshot('gen', snapshotOf(history, epoch, 4)), { ok: true });
    await second.close();
    const third = new FileStore({ dataDir: dir });
    const stored = await third.load('gen');
    assert.equal(stored?.version, 4);
    assert.deepEqual(stored?.journal, []);
    await third.close();
  });

  it('gives ids that differ only in case or in dots and colons their own files', async () => {
    const dir = await dataDir();
    const store = new FileStore({ dataDir: dir });
    const ids = ['Doc', 'doc', '.a', 'a..', 'a:b', 'a.b', 'a_b', 'x'.repeat(128)];
    for (let i = 0; i < ids.length; i++)
      await store.append(ids[i]!, appendOf(history, epoch, 0, i + 1));
    for (let i = 0; i < ids.length; i++)
      assert.equal((await store.load(ids[i]!))?.version, i + 1, ids[i]);
    for (const name of await readdir(dir, { recursive: true }))
      assert.ok(!name.split('/').some((part) => part.startsWith('.')), name);
    await store.close();
  });

  it('rejects document ids outside the allowed alphabet', async () => {
    const store = new FileStore({ dataDir: await dataDir() });
    await assert.rejects(store.load('../escape'), TypeError);
    await assert.rejects(store.append('a/b', appendOf(history, epoch, 0, 1)), TypeError);
    // '.' and '..' would name the directory itself or its parent in any path built from them.
    await assert.rejects(store.load('.'), TypeError);
    await assert.rejects(store.load('..'), TypeError);
    await store.close();
  });

  it('applies in order the appends of one document issued in one turn', async () => {
    const store = new FileStore({ dataDir: await dataDir() });
    await store.append('batch', appendOf(history, epoch, 0, 1));
    // Ten appends at once: they queue behind the first and share one write.
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        store.append('batch', appendOf(history, epoch, i + 1, i + 2)),
      ),
    );
    assert.deepEqual(
      outcomes.map((outcome) => outcome.ok && outcome.version),
      Array.from({ length: 10 }, (_, i) => i + 2),
    );
    assert.ok(reconstruct((await store.load('batch'))!).eq(history.docs[11]!));
    await store.close();
  });
});
