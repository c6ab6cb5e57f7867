import { randomUUID } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { readFile, utimes } from 'node:fs/promises';
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
  /// The holder's PID namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`) and the
  /// machine's boot id: its pid means something to this process only when both are ours. Two
  /// containers sharing a host name (host networking, a set `hostname:`) each run as pid 1.
  /// Absent where /proc is not mounted, and in lock files of versions that did not record them.
  pidNamespace?: string;
  bootId?: string;
}

/// Thrown by `DirectoryLock.acquire` when the directory is held by a live process (this one
/// included) or by a process on another host, whose liveness cannot be checked from here.
export class DirectoryLockedError extends Error {
  readonly dir: string;
  readonly lockPath: string;
  /// Null when the lock file could not be read (it is being written right now).
  readonly holder: LockHolder | null;

  constructor(dir: string, lockPath: string, holder: LockHolder | null, refreshedMsAgo?: number) {
    const who = holder
      ? `process ${holder.pid} on ${holder.hostname} (since ${holder.startedAt})`
      : 'another process';
    const remedy = !holder
      ? 'stop that process first, or point DATA_DIR elsewhere'
      : holder.hostname !== hostname()
        ? `if that host no longer uses this directory, delete ${lockPath}`
        : refreshedMsAgo !== undefined
          ? `it runs in another PID namespace (a container) and refreshed the lock ${Math.round(refreshedMsAgo)} ms ago; stop it first, or point DATA_DIR elsewhere (a lock not refreshed for ${lockStaleAfterMs} ms is taken over)`
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

/// How often a holder touches its lock file (its mtime): what tells a process that cannot see
/// the holder's pid (another PID namespace, another boot) that the holder is alive.
export const lockRefreshMs = 2_000;

/// How long a lock file whose holder's pid cannot be checked from here must go without a
/// refresh before it counts as stale: five refreshes missed, so that an event loop blocked
/// for seconds (a long GC, a huge document parsed) does not cost a live holder its lock.
export const lockStaleAfterMs = 10_000;

// A lock file that cannot be parsed is either being written at this instant (the window between
// the exclusive create and the write is microseconds) or the trace of a crash inside that
// window. Older than this, it is the latter.
const tornLockAgeMs = 10_000;

/// An exclusive claim on a data directory: one lock file, created with O_EXCL, holding the
/// holder's pid, host name, start time, PID namespace and boot id, and touched every
/// `lockRefreshMs` while held. Advisory: it keeps Scriptorium processes apart, not other
/// programs. A lock is taken over only once its holder is certainly gone (see `isStale` and
/// docs/file-store.md, "The lock"): a holder whose pid cannot be checked from here counts as
/// alive while it refreshes the file, since taking a live server's directory would cost
/// acknowledged edits.
export class DirectoryLock {
  readonly dir: string;
  readonly path: string;
  private readonly holder: LockHolder;
  private released = false;
  /// A refresh in flight: a hung disk must not stack one per tick.
  private refreshing = false;
  private readonly refresher: NodeJS.Timeout;

  private constructor(dir: string, path: string, holder: LockHolder, warn: LockWarn | null) {
    this.dir = dir;
    this.path = path;
    this.holder = holder;
    this.refresher = setInterval(() => this.refresh(warn), lockRefreshMs);
    // The lock must not keep a process alive that has nothing else to do.
    this.refresher.unref();
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
      ...processIdentity(),
    };
    // Each round either creates the file or removes a stale one; a rival that keeps winning the
    // create after we removed a stale lock is alive and holds it.
    for (let attempt = 0; attempt < 3; attempt++) {
      if (create(path, holder)) {
        heldHere.add(real);
        return new DirectoryLock(real, path, holder, warn);
      }
      const found = readHolder(path);
      if (found === 'missing') continue;
      if (found === 'torn') {
        if (ageMs(path) < tornLockAgeMs) throw new DirectoryLockedError(real, path, null);
        warn?.({ lock: path }, 'taking over an unreadable lock file left by a crash');
        removeIf(path, null);
        continue;
      }
      const staleness = isStale(found, real, path);
      if (staleness !== true)
        throw new DirectoryLockedError(
          real,
          path,
          found,
          staleness === false ? undefined : staleness,
        );
      warn?.(
        { lock: path, pid: found.pid, since: found.startedAt },
        sameProcessSpace(found)
          ? `taking over the lock of process ${found.pid}, which is no longer running`
          : `taking over the lock of process ${found.pid} (another PID namespace or boot), not refreshed for ${lockStaleAfterMs} ms`,
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
    clearInterval(this.refresher);
    heldHere.delete(this.dir);
    try {
      removeIf(this.path, this.holder.token);
    } catch {
      // Unreadable or not deletable: left for the next start to take over.
    }
  }

  /// Touches the lock file while it is still ours. One that is gone or names another holder
  /// (an operator deleted it, or another process took it over) is left alone from then on,
  /// and said once: touching it would keep someone else's lock alive.
  private refresh(warn: LockWarn | null): void {
    if (this.released || this.refreshing) return;
    this.refreshing = true;
    // Through libuv's pool, not on the event loop: a hung disk must leave the server serving
    // (and its file store's deadlines working), not freeze it every two seconds.
    this.refreshOnce()
      .then(
        (ours) => {
          if (ours) return;
          clearInterval(this.refresher);
          warn?.({ lock: this.path }, 'the data directory lock is no longer this process’s');
        },
        (err: unknown) =>
          // A failing disk: the next tick tries again; missing five in a row lets another
          // process take the directory, which is what a dead holder would look like too.
          warn?.({ lock: this.path, err }, 'could not refresh the data directory lock'),
      )
      .finally(() => {
        this.refreshing = false;
      });
  }

  /// Touches the lock file if it still names this holder; false when it does not.
  private async refreshOnce(): Promise<boolean> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ENOENT') return false;
      throw error;
    }
    if (this.released) return true;
    if (parseHolder(text)?.token !== this.holder.token) return false;
    const now = new Date();
    await utimes(this.path, now, now);
    return true;
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
    // Whole, however many write calls it takes (one can stop short, on a full disk).
    writeFileSync(fd, JSON.stringify(holder) + '\n');
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
      typeof raw['token'] === 'string' &&
      (raw['pidNamespace'] === undefined || typeof raw['pidNamespace'] === 'string') &&
      (raw['bootId'] === undefined || typeof raw['bootId'] === 'string')
    )
      return raw as unknown as LockHolder;
  } catch {
    // Falls through: unreadable.
  }
  return null;
}

/// Whether `holder` is certainly gone: it ran on this host and either its pid can be checked
/// from here (same PID namespace, same boot) and is not alive (or is ours while this process
/// does not hold `dir`), or it cannot and the lock at `path` has not been refreshed for
/// `lockStaleAfterMs`. Returns true, false (alive), or how long ago a holder whose pid cannot
/// be checked refreshed the lock. A holder on another host is never stale from here.
function isStale(holder: LockHolder, dir: string, path: string): boolean | number {
  if (holder.hostname !== hostname()) return false;
  if (!sameProcessSpace(holder)) {
    const refreshed = ageMs(path);
    return refreshed > lockStaleAfterMs ? true : refreshed;
  }
  if (holder.pid === process.pid) return !heldHere.has(dir);
  try {
    process.kill(holder.pid, 0);
    return false;
  } catch (error) {
    // EPERM: alive, under another user.
    return (error as { code?: unknown }).code === 'ESRCH';
  }
}

/// Whether `holder`'s pid names a process this one can check: same PID namespace and same boot.
/// A lock file that records neither is judged by its pid alone.
function sameProcessSpace(holder: LockHolder): boolean {
  if (holder.pidNamespace === undefined && holder.bootId === undefined) return true;
  const ours = processIdentity();
  return (
    ours.pidNamespace !== undefined &&
    ours.bootId !== undefined &&
    holder.pidNamespace === ours.pidNamespace &&
    holder.bootId === ours.bootId
  );
}

/// This process's PID namespace and the machine's boot id, each absent where /proc cannot tell.
function processIdentity(): { pidNamespace?: string; bootId?: string } {
  const identity: { pidNamespace?: string; bootId?: string } = {};
  try {
    identity.pidNamespace = readlinkSync('/proc/self/ns/pid');
  } catch {
    // No /proc (not Linux, or not mounted): the pid alone, and a refreshed file, must do.
  }
  try {
    identity.bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    // As above.
  }
  return identity;
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
