import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';

/// A port nobody listens on right now (the OS picks it; it is closed again at once).
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/// The first of `count` consecutive ports that are free now, below Linux's ephemeral range
/// (32768–60999): a port the OS picks for us is free, but the ones after it may be taken at
/// any moment by outgoing connections, which a swarm of test clients makes by the hundred.
export async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (12_000 - count));
    const servers = [];
    try {
      for (let i = 0; i < count; i++) {
        const server = createServer();
        server.listen(base + i, '127.0.0.1');
        servers.push(server);
        await once(server, 'listening');
      }
      return base;
    } catch {
      // One of them is taken: another range.
    } finally {
      for (const server of servers) server.close();
      await Promise.all(servers.map((server) => once(server, 'close').catch(() => {})));
    }
  }
  throw new Error(`no ${count} consecutive free ports`);
}

/// A throwaway redis-server for tests that stop, pause and restart Redis. Without `dir` it
/// keeps nothing; with `dir` it writes an append-only file there with `appendfsync always`, so
/// a restart after SIGKILL finds every write it acknowledged, like a production Redis.
export class RedisProcess {
  port: number;
  private readonly dir: string | null;
  private child: ChildProcess | null = null;

  constructor(port?: number, options: { dir?: string } = {}) {
    this.port = port ?? 0;
    this.dir = options.dir ?? null;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /// Starts redis-server (on a free port the first time) and resolves once it accepts
  /// connections; rejects if it exits first.
  async start(): Promise<void> {
    if (this.port === 0) this.port = await freePort();
    const persistence = this.dir
      ? ['--dir', this.dir, '--appendonly', 'yes', '--appendfsync', 'always']
      : ['--appendonly', 'no'];
    const child = spawn(
      '/usr/bin/redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', ...persistence],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    this.child = child;
    await new Promise<void>((resolve, reject) => {
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('Ready to accept connections')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${output}`)));
    });
    child.stdout!.resume();
  }

  /// Stops the process without closing its sockets (SIGSTOP): a Redis that no longer answers.
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  /// Lets a paused Redis run again (SIGCONT).
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /// Kills redis-server (SIGKILL: as abrupt as a crash) and resolves once it has exited.
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    this.child = null;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }
}
