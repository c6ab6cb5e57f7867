import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from './redis_process.js';
import { delay } from './wait.js';

const mainPath = fileURLToPath(new URL('../../server/main.js', import.meta.url));

/// A server running as a child process (`node dist/server/main.js`), for tests that kill it,
/// restart it or run two of them.
export interface ServerProcess {
  readonly url: string;
  readonly port: number;
  readonly child: ChildProcess;
  /// Everything the process wrote to stdout and stderr so far.
  output(): string;
  /// Resolves with the exit code (or the signal's name) once the process has exited.
  exited: Promise<number | string>;
  /// Sends `signal` and waits for the exit.
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/// Starts the server with `env` on `port` (a free one by default) and waits until `/healthz`
/// answers. Rejects with the process's output if it exits or does not answer in time.
export async function startServerProcess(
  env: Record<string, string>,
  port?: number,
): Promise<ServerProcess> {
  const chosen = port ?? (await freePort());
  const { child, output, exited } = spawnServer(env, chosen);
  let gone = false;
  void exited.then(() => (gone = true));
  const url = `http://127.0.0.1:${chosen}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (gone) throw new Error(`server exited during start:\n${output()}`);
    try {
      const response = await fetch(`${url}/healthz`);
      if (response.ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server did not answer /healthz in time:\n${output()}`);
    }
    await delay(50);
  }
  return {
    url,
    port: chosen,
    child,
    output,
    exited,
    stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (!gone) child.kill(signal);
      return exited;
    },
  };
}

/// Runs the server with `env` until it exits by itself, as it must when it cannot start;
/// resolves with its exit code (or signal's name) and its output. Rejects, after killing it,
/// if it is still running after `timeoutMs`.
export async function runServerProcess(
  env: Record<string, string>,
  timeoutMs = 15_000,
): Promise<{ exit: number | string; output: string }> {
  const { child, output, exited } = spawnServer(env, await freePort());
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server still running after ${timeoutMs} ms:\n${output()}`));
    }, timeoutMs);
  });
  try {
    return { exit: await Promise.race([exited, late]), output: output() };
  } finally {
    clearTimeout(timer);
  }
}

/// Starts the server with `env` on a free port and returns at once, without waiting for it to
/// answer: for tests that signal it during start-up.
export async function spawnServerProcess(
  env: Record<string, string>,
): Promise<{ child: ChildProcess; output: () => string; exited: Promise<number | string> }> {
  return spawnServer(env, await freePort());
}

function spawnServer(
  env: Record<string, string>,
  port: number,
): { child: ChildProcess; output: () => string; exited: Promise<number | string> } {
  const child = spawn(process.execPath, [mainPath], {
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  return { child, output: () => output, exited };
}
