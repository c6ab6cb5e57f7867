import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { delay } from './wait.js';

/// The nginx binary: Debian's, or whichever is on the PATH.
export const nginxBinary = existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx';

/// Writes `config` to `dir`/nginx.conf (first: nginx started before it exists exits at once),
/// starts nginx in the foreground on it, and waits until `probe` (a URL through it) answers
/// 200. Returns a function that stops it gracefully and waits for its exit.
export async function startNginx(
  dir: string,
  config: string,
  probe: string,
): Promise<() => Promise<void>> {
  await writeFile(join(dir, 'nginx.conf'), config);
  const nginx = spawn(
    nginxBinary,
    [
      ...['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')],
      ...['-g', 'daemon off;'],
    ],
    { stdio: 'ignore' },
  );
  const exited = once(nginx, 'exit');
  const stop = async (): Promise<void> => {
    nginx.kill('SIGQUIT');
    await exited;
  };
  for (let tries = 0; ; tries++) {
    const answer = await fetch(probe).catch(() => null);
    if (answer?.status === 200) return stop;
    if (tries > 200 || nginx.exitCode !== null) {
      await stop();
      assert.fail(`the gateway did not answer ${probe}`);
    }
    await delay(25);
  }
}
