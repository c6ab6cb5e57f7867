import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { createTokenVerifier } from '../../../server/protocol/auth.js';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('../../../server/app/token.js', import.meta.url));
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

  it('signs a token for up to 30 days, expiring when asked', async () => {
    const verifier = createTokenVerifier({ secret });
    for (const [ttl, seconds] of [
      ['90s', 90],
      ['30d', 30 * 86_400],
      ['720h', 30 * 86_400],
    ] as const) {
      const before = Math.floor(Date.now() / 1000);
      const { code, stdout } = await token('--doc', 'notes', '--ttl', ttl);
      assert.equal(code, 0, ttl);
      const verified = await verifier.verify(stdout.trim(), 'notes');
      assert.ok(verified.ok, ttl);
      const expiresIn = verified.grant.expiresAt / 1000 - before;
      assert.ok(expiresIn >= seconds && expiresIn <= seconds + 2, `${ttl}: ${expiresIn}`);
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
      [['--doc', 'notes', '--ttl', '0s'], /--ttl must be a whole number/],
      [['--doc', 'notes', '--ttl=-1h'], /--ttl must be a whole number/],
      [['--doc', 'notes', '--ttl', '1.5h'], /--ttl must be a whole number/],
      [['--doc', 'notes', '--ttl', '1h30m'], /--ttl must be a whole number/],
      [['--doc', 'notes', '--ttl', '31d'], /--ttl must be at most 30d/],
      [['--doc', 'notes', '--ttl', '721h'], /--ttl must be at most 30d/],
      [['--doc', 'notes', '--ttl', '100000d'], /--ttl must be at most 30d/],
      [['--doc', 'notes', '--ttl', '99999999999999999999d'], /--ttl must be at most 30d/],
    ] as const) {
      const { code, stdout, stderr } = await token(...args);
      assert.equal(code, 1, args.join(' '));
      assert.equal(stdout, '', 'no token printed');
      assert.match(stderr, message);
    }
  });
});
