import { mkdir, readdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { FileStore } from '../../server/stores/file/file_store.js';
import { appendOf, typingHistory } from './store_fixtures.js';
import { delay } from './wait.js';

// For a child process of the file store's carry-forward crash test (`brokenWriterCommand`
// starts one): document 'broken' gets an acknowledged append whose checkpoint cannot succeed
// (its journal's place is taken by a directory, the file moved to `<journal>.saved`), while
// document 'busy' appends one step at a time, so that checkpoints keep running and carry
// 'broken' forward. Prints `<docId> <version>` for every append acknowledged, and
// `journal <path>` once 'broken' is broken. With `killAtCarry`, the process kills itself with
// SIGKILL from the logger call that reports the first carry: the store makes it after the
// carried file is durable and before it deletes the older files, so the kill lands between
// the two. Otherwise the test kills it whenever it likes.
//
// Nothing runs on import: the test runner loads every module under dist/test.

export interface BrokenWriterOptions {
  dataDir: string;
  epoch: string;
  steps: number;
  killAtCarry: boolean;
}

/// The command line of a node process that runs `runBrokenWriter(options)`.
export function brokenWriterCommand(options: BrokenWriterOptions): string[] {
  const script =
    `import { runBrokenWriter } from ${JSON.stringify(import.meta.url)};\n` +
    `await runBrokenWriter(${JSON.stringify(options)});`;
  return [process.execPath, '--input-type=module', '-e', script];
}

export async function runBrokenWriter(options: BrokenWriterOptions): Promise<void> {
  const { dataDir, epoch, steps, killAtCarry } = options;
  const history = typingHistory(steps);
  const store = new FileStore({
    dataDir,
    checkpointBytes: 2048,
    checkpointMs: 20,
    logger: {
      warn: (obj, msg) => {
        process.stderr.write(`${msg} ${JSON.stringify(obj)}\n`);
        if (killAtCarry && msg.includes('carried forward')) process.kill(process.pid, 'SIGKILL');
      },
    },
  });
  await store.append('broken', appendOf(history, epoch, 0, 2));
  process.stdout.write('broken 2\n');
  // Checkpointed: its journal exists and the log is empty.
  const logFiles = async (): Promise<string[]> =>
    (await readdir(dataDir)).filter((name) => name.endsWith('.wal'));
  while ((await logFiles()).length > 0) await delay(5);
  const journal = (await readdir(dataDir, { recursive: true }))
    .filter((name) => name.endsWith('.0.journal') && name.includes('broken.'))
    .map((name) => join(dataDir, name))[0]!;
  await rename(journal, `${journal}.saved`);
  await mkdir(journal);
  process.stdout.write(`journal ${journal}\n`);
  // Accepted (the store does not read the journal for it), acknowledged once in the log.
  const outcome = await store.append('broken', appendOf(history, epoch, 2, 4));
  if (!outcome.ok) throw new Error(`broken: ${JSON.stringify(outcome)}`);
  process.stdout.write('broken 4\n');
  for (let version = 0; version < steps; version++) {
    const appended = await store.append('busy', appendOf(history, epoch, version, version + 1));
    if (!appended.ok) throw new Error(`busy: ${JSON.stringify(appended)}`);
    process.stdout.write(`busy ${appended.version}\n`);
  }
  process.stdout.write('done\n');
  // Wait for the kill: closing would checkpoint.
  setInterval(() => {}, 1000);
}
