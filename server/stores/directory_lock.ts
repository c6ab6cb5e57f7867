import { randomUUID } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/// The lock file's name inside the data directory.
export const lockFileName = 'scriptorium.lock';

/// Who holds a data directory, as recorded in its lock file.
export interface LockHolder {
  pid: number;
  hostname: string;
  /// When the holder took the lock (ISO 8601).
  startedAt: string;
  /// Tells this holder's lock apart from a later one written by a process with the same pid.
  token: string;
}

/// Thrown by `DirectoryLock.acquire` when the directory is held by a live process (this one
/// included) or by a process on another host, whose liveness cannot be checked from here.
export class DirectoryLockedError extends Error {
  readonly dir: string;
  readonly lockPath: string;
  /// Null when the lock file could not be read (it is being written right now).
  readonly holder: LockHolder | null;

  constructor(dir: string, lockPath: string, holder: LockHolder | null) {
    const who = holder
      ? `process ${holder.pid} on ${holder.hostname} (since ${holder.startedAt})`
      : 'another process';
    const remedy = !holder
      ? 'stop that process first, or point DATA_DIR elsewhere'
      : holder.hostname !== hostname()
        ? `if that host no longer uses this directory, delete ${lockPath}`
        : holder.pid === process.pid
          ? 'close the store that has it open first'
          : 'stop that process first, or point DATA_DIR elsewhere';
    super(`data directory ${dir} is in use by ${who}: ${remedy}`);
    this.name = 'DirectoryLockedError';
    this.dir = dir;
    this.lockPath = lockPath;
    this.holder = holder;
  }
}

/// Called when a stale lock is taken over; a pino logger's `warn` fits.
export type LockWarn = (obj: object, msg: string) => void;

// Directories locked by this process. A lock file naming our own pid is ours only if it is in
// here: in a container the server is often pid 1 in every life, so after a crash the old lock
// names the pid of the new process.
const heldHere = new Set<string>();

// A lock file that cannot be parsed is either being written at this instant (the window between
// the exclusive create and the write is microseconds) or the trace of a crash inside that
// window. Older than this, it is the latter.
const tornLockAgeMs = 10_000;

/// An exclusive claim on a data directory: one lock file, created with O_EXCL, holding the
/// holder's pid, host name and start time. Advisory: it keeps Scriptorium processes apart,
/// not other programs.
export class DirectoryLock {
  readonly dir: string;
  readonly path: string;
  private readonly holder: LockHolder;
  private released = false;

  private constructor(dir: string, path: string, holder: LockHolder) {
    this.dir = dir;
    this.path = path;
    this.holder = holder;
  }

  /// Creates `dir` if needed and takes its lock. A lock left by a process that is no longer
  /// alive on this host is taken over, after calling `warn`. Synchronous, so that a store can
  /// take it in its constructor and never exist unlocked. Throws `DirectoryLockedError` when
  /// the directory is held, and the file system's error when it cannot be created or written.
  static acquire(dir: string, warn: LockWarn | null): DirectoryLock {
    mkdirSync(dir, { recursive: true });
    // One name per directory however it is spelled (relative, through a symlink).
    const real = realpathSync(dir);
    const path = join(real, lockFileName);
    const holder: LockHolder = {
      pid: process.pid,
      hostname: hostname(),
      startedAt: new Date().toISOString(),
      token: randomUUID(),
    };
    // Each round either creates the file or removes a stale one; a rival that keeps winning the
    // create after we removed a stale lock is alive and holds it.
    for (let attempt = 0; attempt < 3; attempt++) {
      if (create(path, holder)) {
        heldHere.add(real);
        return new DirectoryLock(real, path, holder);
      }
      const found = readHolder(path);
      if (found === 'missing') continue;
      if (found === 'torn') {
        if (ageMs(path) < tornLockAgeMs) throw new DirectoryLockedError(real, path, null);
        warn?.({ lock: path }, 'taking over an unreadable lock file left by a crash');
        removeIf(path, null);
        continue;
      }
      if (!isStale(found, real)) throw new DirectoryLockedError(real, path, found);
      warn?.(
        { lock: path, pid: found.pid, since: found.startedAt },
        `taking over the lock of process ${found.pid}, which is no longer running`,
      );
      removeIf(path, found.token);
    }
    const last = readHolder(path);
    throw new DirectoryLockedError(real, path, typeof last === 'string' ? null : last);
  }

  /// Deletes the lock file if it is still ours (an operator may have removed it, and another
  /// process may since have locked the directory). Never throws: the caller is closing and
  /// has nobody to report a failure to; a lock file left behind is taken over as stale.
  release(): void {
    if (this.released) return;
    this.released = true;
    heldHere.delete(this.dir);
    try {
      removeIf(this.path, this.holder.token);
    } catch {
      // Unreadable or not deletable: left for the next start to take over.
    }
  }
}

/// Creates the lock file exclusively and writes `holder` into it; false when it exists.
function create(path: string, holder: LockHolder): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o644);
  } catch (error) {
    if ((error as { code?: unknown }).code === 'EEXIST') return false;
    throw error;
  }
  try {
    writeSync(fd, JSON.stringify(holder) + '\n');
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return true;
}

function readHolder(path: string): LockHolder | 'missing' | 'torn' {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ENOENT') return 'missing';
    throw error;
  }
  return parseHolder(text) ?? 'torn';
}

function parseHolder(text: string): LockHolder | null {
  try {
    const raw = JSON.parse(text) as Record<string, unknown>;
    if (
      Number.isSafeInteger(raw['pid']) &&
      typeof raw['hostname'] === 'string' &&
      typeof raw['startedAt'] === 'string' &&
      typeof raw['token'] === 'string'
    )
      return raw as unknown as LockHolder;
  } catch {
    // Falls through: unreadable.
  }
  return null;
}

/// Whether `holder` is certainly gone: it ran on this host and its pid is not alive (or is ours
/// while this process does not hold `dir`). A holder on another host is never stale from here.
function isStale(holder: LockHolder, dir: string): boolean {
  if (holder.hostname !== hostname()) return false;
  if (holder.pid === process.pid) return !heldHere.has(dir);
  try {
    process.kill(holder.pid, 0);
    return false;
  } catch (error) {
    // EPERM: alive, under another user.
    return (error as { code?: unknown }).code === 'ESRCH';
  }
}

/// Removes the lock file if it still holds `token` (null: if it is still unreadable). Two
/// processes taking over one stale lock could otherwise each delete the lock the other just
/// wrote. The check and the unlink are two system calls, so this narrows that window to
/// microseconds rather than closing it.
function removeIf(path: string, token: string | null): void {
  const found = readHolder(path);
  if (found === 'missing') return;
  if (token === null ? found !== 'torn' : found === 'torn' || found.token !== token) return;
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ENOENT') throw error;
  }
}

function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}
