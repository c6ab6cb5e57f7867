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

/// A throwaway redis-server without persistence, for tests that stop and restart Redis.
export class RedisProcess {
  readonly port: number;
  private child: ChildProcess | null = null;

  constructor(port: number) {
    this.port = port;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /// Starts redis-server and resolves once it accepts connections; rejects if it exits first.
  async start(): Promise<void> {
    const child = spawn(
      '/usr/bin/redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
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

  /// Kills redis-server (SIGKILL: as abrupt as a crash) and resolves once it has exited.
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    this.child = null;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
}
