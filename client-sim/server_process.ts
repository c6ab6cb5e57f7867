import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
// The server's own table of the variables it reads: the only list that cannot drift from what
// the child does with its environment (the one import of server/ outside it and its tests).
import { environment } from '../server/config.js';
import type { CpuReading } from './cpu_probe.js';
import { probeServer } from './server_http.js';

/// The server's entry point in the build output, `dist/server/main.js`.
export const serverEntry = fileURLToPath(new URL('../server/main.js', import.meta.url));

/// A server child process started by `startServerProcess`.
export interface ServerProcess {
  url: string;
  pid: number;
  /// The child itself: with `ipc`, its `send` and `message` event reach code preloaded into it.
  child: ChildProcess;
  /// SIGTERM, then SIGKILL after 15 s; resolves when the child has exited.
  stop: () => Promise<void>;
}

/// How to start the child beyond its environment.
export interface ServerProcessOptions {
  /// Node options put before the entry point, e.g. `['--import', url]` to preload a probe.
  nodeArgs?: readonly string[];
  /// Opens Node's IPC channel to the child (`child.send`, `child.on('message')`).
  ipc?: boolean;
}

/// Starts `node dist/server/main.js` on a free loopback port with STORE=memory and
/// LOG_LEVEL=warn, overridden by `env` (e.g. `{MAX_REBASE_STEPS: '0'}`, or `{STORE: '',
/// REDIS_URL: ...}` for another store), and waits for `/healthz`. The child's output goes to
/// this process's stdout and stderr. Throws when the child does not answer within 15 s.
export async function startServerProcess(
  env: Readonly<Record<string, string>> = {},
  options: ServerProcessOptions = {},
): Promise<ServerProcess> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [...(options.nodeArgs ?? []), serverEntry], {
    env: {
      ...process.env,
      STORE: 'memory',
      // Not a REDIS_URL of this process's environment, which STORE=memory contradicts.
      REDIS_URL: '',
      LOG_LEVEL: 'warn',
      ...env,
      // The port and host are the harness's, never the caller's: load stays on loopback.
      PORT: String(port),
      HOST: '127.0.0.1',
    },
    stdio: options.ipc ? ['ignore', 'inherit', 'inherit', 'ipc'] : ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      await probeServer(url, 1000);
      break;
    } catch (err) {
      if (child.exitCode !== null || Date.now() > deadline) {
        child.kill();
        throw new Error(`the server child did not come up on ${url}: ${(err as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    url,
    pid: child.pid!,
    child,
    stop: async () => {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/// Variables a server child may be given besides its settings: they are read by Node, libuv or
/// the debug module, not by the server's configuration.
export const processVariables: readonly string[] = [
  'NODE_OPTIONS',
  'NODE_DEBUG',
  'NODE_V8_COVERAGE',
  'UV_THREADPOOL_SIZE',
  'DEBUG',
  'TZ',
];

/// Parses `KEY=VALUE` strings (as given to `--server-env`, or `option`) into an object. Throws
/// for an entry without `=`, and for a key the server does not read (not in server/config.ts's
/// `environment`, nor one of `processVariables`), naming the closest setting when one is near:
/// the server ignores names it does not know, so a typo would run the default server while the
/// report printed the typo as its environment.
export function parseEnvPairs(
  pairs: readonly string[],
  option = '--server-env',
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf('=');
    const key = at > 0 ? pair.slice(0, at) : '';
    if (!/^[A-Z_][A-Z0-9_]*$/i.test(key)) {
      throw new Error(`${option} takes KEY=VALUE, got "${pair}"`);
    }
    if (!Object.hasOwn(environment, key) && !processVariables.includes(key)) {
      const near = closestSetting(key);
      throw new Error(
        `${option}: the server reads no ${key}${near ? ` (did you mean ${near}?)` : ''}; its settings are listed in server/settings.ts and docs/configuration.md`,
      );
    }
    env[key] = pair.slice(at + 1);
  }
  return env;
}

/// The known variable nearest to `key` in edit distance, when at most 3 edits away.
function closestSetting(key: string): string | null {
  let best: string | null = null;
  let bestDistance = 4;
  for (const name of [...Object.keys(environment), ...processVariables]) {
    const distance = editDistance(key.toUpperCase(), name);
    if (distance < bestDistance) {
      best = name;
      bestDistance = distance;
    }
  }
  return best;
}

/// Levenshtein distance, one row at a time (names are short).
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(
        previous[j]! + 1,
        row[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = row;
  }
  return previous[b.length]!;
}

/// CPU time samples of one process, so that the CPU spent between two wall-clock instants can
/// be read afterwards (interpolated between the nearest samples).
export class CpuSamples {
  protected readonly samples: { atMs: number; cpuMs: number }[] = [];

  /// Notes that the process had used `cpuMs` of CPU by `atMs` (ms since the epoch).
  push(atMs: number, cpuMs: number): void {
    this.samples.push({ atMs, cpuMs });
  }

  /// CPU milliseconds the process used from `fromMs` to `toMs` (wall clock, ms since the
  /// epoch), interpolated between the nearest samples; null when the span is not covered.
  cpuMsBetween(fromMs: number, toMs: number): number | null {
    const from = this.at(fromMs);
    const to = this.at(toMs);
    return from === null || to === null ? null : to - from;
  }

  private at(timeMs: number): number | null {
    const list = this.samples;
    if (list.length === 0) return null;
    if (timeMs < list[0]!.atMs || timeMs > list[list.length - 1]!.atMs) return null;
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1]!;
      const b = list[i]!;
      if (timeMs <= b.atMs) {
        const share = b.atMs === a.atMs ? 0 : (timeMs - a.atMs) / (b.atMs - a.atMs);
        return a.cpuMs + share * (b.cpuMs - a.cpuMs);
      }
    }
    return list[list.length - 1]!.cpuMs;
  }
}

/// Samples a process's CPU time (user + system, from `/proc/<pid>/stat`) every `everyMs`.
/// Linux only: on other systems, or when the file cannot be read, `cpuMsBetween` returns null.
/// Its resolution is the kernel's 10 ms tick; `ProbeCpuSamples` reads the process itself.
export class CpuSampler extends CpuSamples {
  private readonly timer: NodeJS.Timeout;
  private readonly tickMs = 10; // USER_HZ is 100 on every Linux this runs on.

  constructor(
    private readonly pid: number,
    everyMs = 250,
  ) {
    super();
    this.timer = setInterval(() => void this.sample(), everyMs);
    void this.sample();
  }

  /// Stops sampling, after one last sample.
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sample();
  }

  private async sample(): Promise<void> {
    try {
      const stat = await readFile(`/proc/${this.pid}/stat`, 'utf8');
      // Fields after the command name, which is in parentheses and may contain spaces:
      // utime and stime are fields 14 and 15 of the line, 12 and 13 after the ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = Number(fields[11]) + Number(fields[12]);
      this.push(Date.now(), ticks * this.tickMs);
    } catch {
      // Not Linux, or the process has exited: the span it would have covered reads as null.
    }
  }
}

/// The CPU readings a child started with `cpuProbeArgs` (and `ipc`) sends of itself: its own
/// `process.cpuUsage()`, in microseconds, every 250 ms.
export class ProbeCpuSamples extends CpuSamples {
  private readonly listener = (message: unknown) => {
    const reading = message as Partial<CpuReading> | null;
    if (reading?.probe === 'cpu' && typeof reading.atMs === 'number') {
      this.push(reading.atMs, (reading.cpuUs ?? 0) / 1000);
    }
  };

  constructor(private readonly child: ChildProcess) {
    super();
    child.on('message', this.listener);
  }

  /// Asks the child for a last reading, waits up to a second for it, and stops listening.
  async stop(): Promise<void> {
    const child = this.child;
    if (child.connected && child.exitCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, 1000);
        function done() {
          clearTimeout(timer);
          child.off('message', onReading);
          resolve();
        }
        function onReading(message: unknown) {
          if ((message as Partial<CpuReading> | null)?.probe === 'cpu') done();
        }
        child.on('message', onReading);
        child.send({ probe: 'cpu' }, (err) => {
          if (err) done();
        });
      });
    }
    child.off('message', this.listener);
  }
}

/// The Node options that preload the CPU probe (`client-sim/cpu_probe.ts`) into a child.
export const cpuProbeArgs: readonly string[] = [
  '--import',
  new URL('./cpu_probe.js', import.meta.url).href,
];

/// A port free on 127.0.0.1 a moment ago, picked by the OS.
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}
