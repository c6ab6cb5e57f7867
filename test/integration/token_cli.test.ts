import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { createTokenVerifier } from '../../server/protocol/auth.js';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('../../server/app/token.js', import.meta.url));
const secret = 'a-token-cli-secret-that-is-long-enough-0123456789';

/// Runs `npm run token`'s script with `args`: its exit code and what it printed.
async function token(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run('node', [cli, ...args], {
      env: { ...process.env, AUTH_SECRET: secret },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('npm run token', () => {
  it('prints tokens the server accepts, for an id, a prefix and every document', async () => {
    const verifier = createTokenVerifier({ secret });
    for (const [doc, docId] of [
      ['notes', 'notes'],
      ['team-*', 'team-42'],
      ['*', 'anything'],
    ] as const) {
      const { code, stdout } = await token('--doc', doc, '--user', 'ann');
      assert.equal(code, 0);
      assert.equal((await verifier.verify(stdout.trim(), docId)).ok, true, doc);
    }
  });

  it('refuses, with exit 1 and a message, tokens the server would refuse', async () => {
    for (const [args, message] of [
      [['--doc', 'notes', '--user', ''], /--user must be 1 to 256 characters/],
      [['--doc', 'notes', '--user', 'u'.repeat(257)], /--user must be 1 to 256 characters/],
      [['--doc', 'bad id'], /--doc must be a document id/],
      [['--doc', '..'], /--doc must be a document id/],
      [['--doc', 'x'.repeat(129)], /--doc must be a document id/],
      [['--doc', 'bad prefix*'], /--doc must be a document id/],
    ] as const) {
      const { code, stdout, stderr } = await token(...args);
      assert.equal(code, 1, args.join(' '));
      assert.equal(stdout, '', 'no token printed');
      assert.match(stderr, message);
    }
  });
});
