import { FileStore } from '../../server/stores/file_store.js';
import { appendOf, typingHistory } from './store_fixtures.js';

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
