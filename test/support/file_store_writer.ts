import { readdir } from 'node:fs/promises';
import { FileStore } from '../../server/stores/file/file_store.js';
import { appendOf, typingHistory } from './store_fixtures.js';
import { delay } from './wait.js';

// For a child process of the file store's crash test (`writerCommand` starts one): appends the typing history to `docs`
// documents at once, through one FileStore on `dataDir`, and prints `<docId> <version>` for
// every append acknowledged. The test kills it with SIGKILL mid-stream and checks that every
// acknowledged version survived. `checkpointBytes` is small, so that checkpoints (log
// rotation, journal appends, log deletion) are in flight when the kill lands.
//
// Nothing runs on import: the test runner loads every module under dist/test.

export interface WriterOptions {
  dataDir: string;
  docs: number;
  checkpointBytes: number;
  epoch: string;
  steps: number;
}

/// The command line of a node process that runs `runWriter(options)`.
export function writerCommand(options: WriterOptions): string[] {
  const script =
    `import { runWriter } from ${JSON.stringify(import.meta.url)};\n` +
    `await runWriter(${JSON.stringify(options)});`;
  return [process.execPath, '--input-type=module', '-e', script];
}

export async function runWriter(options: WriterOptions): Promise<void> {
  const { dataDir, docs, checkpointBytes, epoch } = options;
  const length = options.steps;
  const history = typingHistory(length);
  const store = new FileStore({
    dataDir,
    checkpointBytes,
    logger: { warn: (obj, msg) => process.stderr.write(`${msg} ${JSON.stringify(obj)}\n`) },
  });
  const writers = [];
  for (let d = 0; d < docs; d++) {
    const docId = `crash-${d}`;
    writers.push(
      (async () => {
        let version = (await store.load(docId))?.version ?? 0;
        // Entries of 1 to 3 steps, varying by document and version.
        while (version < length) {
          const to = Math.min(length, version + 1 + ((version + d) % 3));
          const outcome = await store.append(docId, appendOf(history, epoch, version, to));
          if (!outcome.ok) throw new Error(`${docId}: ${JSON.stringify(outcome)}`);
          version = outcome.version;
          process.stdout.write(`${docId} ${version}\n`);
        }
      })(),
    );
  }
  await Promise.all(writers);
  process.stdout.write('done\n');
  // Wait for the kill: closing would checkpoint, which the test means to catch unfinished.
  setInterval(() => {}, 1000);
}

export interface LimitedWriterOptions {
  dataDir: string;
  docId: string;
  epoch: string;
  steps: number;
  checkpointBytes: number;
  checkpointMs: number;
  logZeroAheadBytes: number;
  /// After the last append, wait this long and print `wal files <count>` (the log files in
  /// `dataDir`) before closing.
  pauseMs?: number;
}

/// The command line of a process that runs `runLimitedWriter(options)` (or `run(options)`, one
/// of this module's functions) with its files limited to `maxFileKiB` (`ulimit -f`): a write
/// that crosses the limit stops short, and the next one fails with EFBIG, as on a full disk.
export function limitedWriterCommand(
  options: LimitedWriterOptions | { dataDir: string },
  maxFileKiB: number,
  run: 'runLimitedWriter' | 'runUrgentCheckpoints' = 'runLimitedWriter',
): string[] {
  const script =
    `import { ${run} } from ${JSON.stringify(import.meta.url)};\n` +
    `await ${run}(${JSON.stringify(options)});`;
  const node = [process.execPath, '--input-type=module', '-e', script]
    .map((word) => `'${word.replaceAll("'", `'\\''`)}'`)
    .join(' ');
  return ['bash', '-c', `ulimit -f ${maxFileKiB} && exec ${node}`];
}

/// Appends one step at a time to `docId` until an append is refused or `steps` are in,
/// printing `<version>` for each one acknowledged and the store's warnings on stderr; then
/// closes the store (`closed`, or `close failed`) and exits.
export async function runLimitedWriter(options: LimitedWriterOptions): Promise<void> {
  const history = typingHistory(options.steps);
  const store = new FileStore({
    dataDir: options.dataDir,
    checkpointBytes: options.checkpointBytes,
    checkpointMs: options.checkpointMs,
    logZeroAheadBytes: options.logZeroAheadBytes,
    logger: { warn: (obj, msg) => process.stderr.write(`${msg} ${JSON.stringify(obj)}\n`) },
  });
  let version = 0;
  try {
    while (version < options.steps) {
      const append = appendOf(history, options.epoch, version, version + 1);
      const outcome = await store.append(options.docId, append);
      if (!outcome.ok) break;
      version = outcome.version;
      process.stdout.write(`${version}\n`);
    }
  } catch (error) {
    process.stderr.write(`append refused: ${String(error)}\n`);
  }
  if (options.pauseMs !== undefined) {
    await delay(options.pauseMs);
    const logs = (await readdir(options.dataDir)).filter((name) => name.endsWith('.wal'));
    process.stdout.write(`wal files ${logs.length}\n`);
  }
  await store.close().then(
    () => process.stdout.write('closed\n'),
    (error: unknown) => process.stdout.write(`close failed: ${String(error)}\n`),
  );
}

/// Under a 32 KiB file limit: makes log writes fail (a round of 600 steps) at chosen moments,
/// with a checkpoint started by the log's size in between, and prints `urgent warnings <n>`
/// (the warnings of checkpoints a failed log write started) and `wal files <n>` 1.5 s after
/// the last failure.
export async function runUrgentCheckpoints(options: { dataDir: string }): Promise<void> {
  const history = typingHistory(700);
  let urgent = 0;
  const store = new FileStore({
    dataDir: options.dataDir,
    checkpointBytes: 4000,
    checkpointMs: 60_000,
    checkpointRetryMs: 1000,
    logZeroAheadBytes: 0,
    logger: {
      warn: (_obj, msg) => {
        if (msg.includes('a write-ahead log write failed')) urgent++;
      },
    },
  });
  const versions = new Map<string, number>();
  const small = async (docId: string): Promise<void> => {
    const version = versions.get(docId) ?? 0;
    const outcome = await store.append(docId, appendOf(history, 'e1', version, version + 1));
    if (!outcome.ok) throw new Error(JSON.stringify(outcome));
    versions.set(docId, outcome.version);
  };
  const big = (docId: string): Promise<unknown> =>
    store.append(docId, appendOf(history, 'e1', 0, 600)).then(
      () => {
        throw new Error('a round over the file limit was acknowledged');
      },
      () => {},
    );
  await small('a');
  await big('big-1');
  await delay(100);
  // A second failure within `checkpointRetryMs` of the first: its checkpoint waits.
  await small('a');
  await big('big-2');
  // Before it starts, the log reaches `checkpointBytes`: a checkpoint starts for that.
  for (let i = 0; i < 60; i++) await small('b');
  await delay(1500);
  // A file acknowledges entries, then a round in it fails.
  for (let i = 0; i < 5; i++) await small('c');
  await big('big-3');
  await delay(1500);
  const logs = (await readdir(options.dataDir)).filter((name) => name.endsWith('.wal'));
  process.stdout.write(`urgent warnings ${urgent}\nwal files ${logs.length}\n`);
  await store.close();
}
