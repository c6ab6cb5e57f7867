import { execFileSync } from 'node:child_process';
import { constants } from 'node:fs';
import { open, readFile, rename, rm, writeFile } from 'node:fs/promises';

// A hung disk, without mocks: a FIFO in place of a file. Opening a FIFO blocks until its other
// end is opened, so a store that opens the path waits in open(2), on one of libuv's four pool
// threads, until the test lets it go. Tests must release every FIFO they wedge a store on, or
// the thread stays blocked until the process exits (and `process.exit` waits for it).

/// Replaces the file at `path` by a FIFO nobody has open; resolves with the file's former
/// content (null when there was no file).
export async function wedge(path: string): Promise<Buffer | null> {
  const content = await readFile(path).catch(() => null);
  await rm(path, { force: true });
  execFileSync('mkfifo', [path]);
  return content;
}

/// Releases a reader blocked opening the FIFO at `path`: puts a regular file holding `content`
/// back at `path` (for whoever opens it next), then writes `payload` to the reader and closes,
/// so that the reader reads `payload`. Throws (ENXIO) when nobody is blocked reading.
export async function releaseReader(
  path: string,
  content: Buffer | string,
  payload: Buffer | string,
): Promise<void> {
  const fifo = await open(path, constants.O_WRONLY | constants.O_NONBLOCK);
  try {
    await writeFile(`${path}.restored`, content);
    await rename(`${path}.restored`, path);
    await fifo.write(Buffer.from(payload));
  } finally {
    await fifo.close();
  }
}

/// Releases a writer blocked opening the FIFO at `path`: moves the FIFO aside, opens its read
/// end, which lets the writer's open return (its fsync then fails: a FIFO cannot be synced),
/// and removes it, so that the next open of `path` creates a regular file. Resolves with what
/// was written.
export async function releaseWriter(path: string): Promise<string> {
  // Aside first: once the writer fails, the store may open `path` again to read it back. A
  // read open of the FIFO would block for a writer that never comes and hold a pool thread for
  // good, which also keeps the test process from exiting.
  const aside = `${path}.released`;
  await rename(path, aside);
  const fifo = await open(aside, constants.O_RDONLY | constants.O_NONBLOCK);
  await rm(aside, { force: true });
  let text = '';
  const buffer = Buffer.alloc(65536);
  // The writer writes, then fails its fsync and closes: read until it has closed.
  const deadline = Date.now() + 5000;
  try {
    for (;;) {
      try {
        const { bytesRead } = await fifo.read(buffer, 0, buffer.length, null);
        if (bytesRead === 0 && text !== '') break;
        text += buffer.toString('utf8', 0, bytesRead);
      } catch (error) {
        if ((error as { code?: unknown }).code !== 'EAGAIN') throw error;
      }
      if (Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  } finally {
    await fifo.close();
  }
  return text;
}
