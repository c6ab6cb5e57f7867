import { constants, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { syncDirectory, syncDirectorySync } from './durable_write.js';
import {
  frameRound,
  logFileName,
  logLine,
  logPath,
  readLogFile,
  type LogRecord,
} from './log_format.js';

/// What a directory's log files held when the store opened: their records, oldest first,
/// the files, and the generation the next file takes.
export interface RecoveredLog {
  records: LogRecord[];
  files: string[];
  nextGeneration: number;
}

interface Commit {
  text: string;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/// With O_DSYNC each write returns once its data (and the file size) is on disk: a write and
/// an fdatasync in one system call, so one trip through libuv's thread pool per round instead
/// of two. Each trip waits for a pool thread and then for the event loop, which is most of a
/// round's time on a busy server. Where the flag does not exist, `write` syncs separately.
/// No O_APPEND: rounds go at positions the log keeps, over the zeros written ahead of them.
const dsync = constants.O_DSYNC;
/// O_EXCL: a generation's file is always new (a name taken means a bug, not a file to write
/// over).
const openFlags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (dsync ?? 0);

/// How far ahead of its rounds a log file is filled with zeros, by default (see `aheadBytes`).
export const defaultZeroAheadBytes = 2 * 1024 * 1024;

/// The write-ahead log the file store shares between all its documents (docs/file-store.md,
/// "The write-ahead log"): every accepted append of every document goes into one file, and
/// every commit gathered while the previous one was being written (or within one turn) shares
/// one write and one `fdatasync`. Each such round is framed with its length and CRC-32. The
/// file is filled with zeros ahead of the rounds, so that a round's sync changes no metadata.
/// A failed write or sync leaves the file's tail unknown, so the log moves on to a new file:
/// a torn round is only ever the last of its file.
export class WriteAheadLog {
  private readonly dir: string;
  private generationNumber: number;
  /// The open file and its generation; replaced between rounds once `rotate` moved on.
  private handle: FileHandle | null = null;
  private handleGeneration = 0;
  private queue: Commit[] = [];
  private writing = false;
  private scheduled = false;
  /// The write loop running now (or the last one): `close` waits on it.
  private draining: Promise<void> = Promise.resolve();
  /// The closing of the files left (see `retire`): `close` waits on it.
  private closingOld: Promise<void> = Promise.resolve();
  private bytesWritten = 0;
  /// Where the open file's next round goes, and how far the file has been written durably
  /// (rounds, or zeros ahead of them): a round that ends within it changes no metadata.
  private position = 0;
  private allocated = 0;
  /// The zeros being written ahead now, and whether writing them failed in this file (the
  /// rounds then extend the file themselves, as they would without them).
  private extending: Promise<void> | null = null;
  private extendFailed = false;
  /// The file opened a second time for the zeros: the kernel reports a failed write-back once
  /// per open file, so a round's own sync must not share its descriptor with the zeros' (whose
  /// sync could take the error of a round's page, the round then counted as durable).
  private zerosHandle: FileHandle | null = null;
  private readonly aheadBytes: number;
  private readonly onFailure: ((error: unknown) => void) | null;

  /// `aheadBytes`: how many zeros to write ahead of the rounds at a time (once a file has less
  /// than half of that left ahead of its end); 0 to have every round extend the file.
  /// `onFailure` is told of every failed round, after the log has moved on to a new file (see
  /// `Checkpointer.logWriteFailed`).
  constructor(
    dir: string,
    generation: number,
    aheadBytes = defaultZeroAheadBytes,
    onFailure: ((error: unknown) => void) | null = null,
  ) {
    this.dir = dir;
    this.generationNumber = generation;
    this.aheadBytes = aheadBytes;
    this.onFailure = onFailure;
  }

  /// The generation commits go to now.
  get generation(): number {
    return this.generationNumber;
  }

  /// Bytes committed to the current file.
  get size(): number {
    return this.bytesWritten;
  }

  /// The log file of `generation` in `dir`.
  static path(dir: string, generation: number): string {
    return logPath(dir, generation);
  }

  /// Reads every log file in `dir` (synchronously: the store does this once, when it opens).
  /// A round cut short by the end of its file, from a crash or a failed write, is dropped; a
  /// round whose checksum does not match, or any other damage, throws a `TypeError` naming the
  /// file and offset, since it may hold acknowledged steps (see `readLogFile`).
  static recover(dir: string): RecoveredLog {
    const found: { generation: number; path: string }[] = [];
    for (const name of readdirSync(dir)) {
      const match = logFileName.exec(name);
      if (match) found.push({ generation: Number(match[1]), path: join(dir, name) });
    }
    found.sort((a, b) => a.generation - b.generation);
    const records: LogRecord[] = [];
    for (const { path } of found) {
      for (const record of readLogFile(readFileSync(path), path)) records.push(record);
    }
    const last = found[found.length - 1];
    return {
      records,
      files: found.map((file) => file.path),
      nextGeneration: last ? last.generation + 1 : 1,
    };
  }

  /// One framed round of the log holding `lines` (whole lines).
  static round(lines: string): Buffer {
    return frameRound(lines);
  }

  /// Deletes the given log files and makes that durable (synchronously, at open).
  static removeSync(dir: string, files: string[]): void {
    if (files.length === 0) return;
    for (const file of files) unlinkSync(file);
    syncDirectorySync(dir);
  }

  /// One line of the log for an entry already serialized as `entryJSON` (an object literal).
  static line(docId: string, epoch: string, entryJSON: string): string {
    return logLine(docId, epoch, entryJSON);
  }

  /// Appends `text` (whole lines) and resolves once it is on disk. Commits made while a write
  /// is in flight, or within the same turn, go out together.
  commit(text: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ text, resolve, reject });
      if (this.writing || this.scheduled) return;
      this.scheduled = true;
      // After the current turn's I/O callbacks, so that every document flushing in this turn
      // joins the first write.
      setImmediate(() => {
        this.scheduled = false;
        this.draining = this.drain();
      });
    });
  }

  /// Sends the next round of commits to a new file and returns the generation of the one
  /// left (a round in flight still finishes there). The write loop closes the old handle
  /// between rounds, never under a write. With `reserve` (a checkpoint), the generation right
  /// after the one left is skipped and kept for `writeCarried`: replay reads the files in
  /// generation order, so what is carried there comes after every record it replaces and
  /// before every commit made from now on.
  rotate(reserve = false): number {
    const left = this.generationNumber;
    this.generationNumber += reserve ? 2 : 1;
    this.bytesWritten = 0;
    return left;
  }

  /// Resolves true once no round may still be on its way into the file of `generation` or an
  /// earlier one (one that was in flight when `rotate` left it, or whose handle was open on
  /// it), false when that is still so after `timeoutMs` (a hung write). The commits of such a
  /// round are acknowledged only once it has landed, so that file must not be deleted before.
  /// Polls the write loop's state, every millisecond while it lasts (a round's time), so that
  /// nothing on the write path keeps count for it.
  async landedThrough(generation: number, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.writing && this.handleGeneration <= generation) {
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    return true;
  }

  /// Writes `text` (whole lines) as the one round of a new file of `generation` (one that
  /// `rotate` reserved), fsyncs it and its directory entry. Outside the write loop: the
  /// checkpoint carries forward what it could not move to a journal, and commits never wait
  /// for it. Rejects with the file system's error; whatever landed of the file is then a
  /// torn round (dropped on replay) or records that are also in the files it was to replace,
  /// which stay.
  async writeCarried(generation: number, text: string): Promise<void> {
    const round = WriteAheadLog.round(text);
    const handle = await open(WriteAheadLog.path(this.dir, generation), 'w');
    try {
      for (let done = 0; done < round.length;) {
        const { bytesWritten } = await handle.write(round, done, round.length - done);
        done += bytesWritten;
      }
      await handle.sync();
    } finally {
      await handle.close();
    }
    await syncDirectory(this.dir);
  }

  /// Deletes the log files of generations up to `generation` (their records are in the
  /// documents' journals by now, or carried forward to a later file) and syncs the directory.
  async removeThrough(generation: number, oldest: number): Promise<void> {
    for (let g = oldest; g <= generation; g++) {
      await unlink(WriteAheadLog.path(this.dir, g)).catch((error: unknown) => {
        if ((error as { code?: unknown }).code !== 'ENOENT') throw error;
      });
    }
    await syncDirectory(this.dir);
  }

  /// Waits for the commits in flight; later commits are refused by the store, not here.
  async close(): Promise<void> {
    // A scheduled loop starts within this turn's immediates; the loop ends once the queue is
    // empty. Awaiting it (not polling) costs nothing while a write hangs on a stuck disk.
    if (this.scheduled) await new Promise<void>((resolve) => setImmediate(resolve));
    await this.draining;
    const handle = this.handle;
    const zeros = this.zerosHandle;
    const extension = this.extending;
    this.handle = null;
    this.zerosHandle = null;
    this.extending = null;
    await this.closingOld;
    if (extension) await extension;
    if (zeros) await zeros.close();
    if (handle) await handle.close();
  }

  /// Leaves the open file for the next round's: it is closed once the zeros being written in
  /// it have landed (never under a write), off the rounds' path.
  private retire(): void {
    const old = this.handle!;
    const zeros = this.zerosHandle;
    const extension = this.extending;
    this.handle = null;
    this.zerosHandle = null;
    this.extending = null;
    this.closingOld = this.closingOld
      .then(() => extension)
      .then(() => zeros?.close())
      .then(() => old.close())
      .catch(() => {});
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.queue.length > 0) {
      const round = this.queue;
      this.queue = [];
      let text = round[0]!.text;
      for (let i = 1; i < round.length; i++) text += round[i]!.text;
      try {
        await this.write(text);
      } catch (error) {
        // The file's tail is unknown now: start a new one, so that whatever landed of this
        // round stays the last thing in its file.
        if (this.handleGeneration === this.generationNumber) this.rotate();
        for (const commit of round) commit.reject(error);
        this.onFailure?.(error);
        continue;
      }
      for (const commit of round) commit.resolve();
    }
    this.writing = false;
  }

  private async write(text: string): Promise<void> {
    let fresh = false;
    if (this.handle && this.handleGeneration !== this.generationNumber) {
      this.retire();
    }
    if (!this.handle) {
      this.handleGeneration = this.generationNumber;
      this.handle = await open(WriteAheadLog.path(this.dir, this.handleGeneration), openFlags);
      this.position = 0;
      this.allocated = 0;
      this.extendFailed = false;
      fresh = true;
    }
    const handle = this.handle;
    const round = WriteAheadLog.round(text);
    const at = this.position;
    const end = at + round.length;
    // Past the zeros, wait for those being written: the round must not race them over the
    // same bytes. Only when the writes ahead fall behind the rounds (or failed).
    if (end > this.allocated && this.extending) await this.extending;
    // A short write is not an error: write the rest. Whatever of the round lands before a
    // failure is torn, and dropped on replay.
    for (let done = 0; done < round.length;) {
      const { bytesWritten } = await handle.write(round, done, round.length - done, at + done);
      done += bytesWritten;
    }
    if (dsync === undefined) await handle.datasync();
    // A new file's records count only once its directory entry is durable: once per file.
    // Not cached across a failure: the next file after one is new anyway.
    if (fresh) await syncDirectory(this.dir);
    this.position = end;
    if (end > this.allocated) this.allocated = end;
    if (this.handleGeneration === this.generationNumber) this.bytesWritten += round.length;
    this.writeAhead();
  }

  /// Starts writing the next `aheadBytes` of zeros after the file's end, beside the rounds
  /// (which stay before that end meanwhile), once less than half of them is left.
  private writeAhead(): void {
    if (this.aheadBytes === 0 || this.extending || this.extendFailed) return;
    if (this.allocated - this.position >= this.aheadBytes / 2) return;
    // A file `rotate` has left takes no more rounds.
    if (this.handleGeneration !== this.generationNumber) return;
    const handle = this.handle!;
    const path = WriteAheadLog.path(this.dir, this.handleGeneration);
    const from = this.allocated;
    const zeros = zeroBuffer(this.aheadBytes);
    const extension: Promise<void> = (async () => {
      if (!this.zerosHandle) {
        const opened = await open(path, constants.O_WRONLY | (dsync ?? 0));
        // Left meanwhile (`retire` or `close` saw no second handle to close): close it here.
        if (this.handle !== handle) {
          await opened.close();
          return;
        }
        this.zerosHandle = opened;
      }
      const target = this.zerosHandle;
      for (let done = 0; done < zeros.length;) {
        const { bytesWritten } = await target.write(zeros, done, zeros.length - done, from + done);
        done += bytesWritten;
      }
      if (dsync === undefined) await target.datasync();
      if (this.handle === handle) this.allocated = from + zeros.length;
    })()
      .catch(() => {
        // Nothing depends on the zeros: the rounds extend the file themselves from here on.
        // (A failed write-back of a round's page is reported to the round's own sync too,
        // since the zeros have a descriptor of their own.)
        if (this.handle === handle) this.extendFailed = true;
      })
      .finally(() => {
        if (this.extending === extension) this.extending = null;
      });
    this.extending = extension;
  }
}

let zeros: Buffer | null = null;

/// A buffer of `size` zero bytes, kept between calls (it is only ever read).
function zeroBuffer(size: number): Buffer {
  if (!zeros || zeros.length !== size) zeros = Buffer.alloc(size);
  return zeros;
}
