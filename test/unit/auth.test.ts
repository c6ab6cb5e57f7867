import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { SignJWT } from 'jose';
import {
  createTokenVerifier,
  parseDuration,
  scopeAllows,
  signToken,
} from '../../server/protocol/auth.js';

const secret = 'a test secret that is long enough for HS256';

describe('tokens', () => {
  it('grants what a good token says, for documents in its scope', async () => {
    const verifier = createTokenVerifier({ secret });
    const token = await signToken(secret, {
      user: 'ann',
      doc: 'team:*',
      access: 'read',
      ttlSeconds: 60,
    });
    const outcome = await verifier.verify(token, 'team:notes');
    assert.ok(outcome.ok);
    assert.equal(outcome.grant.user, 'ann');
    assert.equal(outcome.grant.access, 'read');
    assert.ok(outcome.grant.expiresAt > Date.now());
    const other = await verifier.verify(token, 'other:notes');
    assert.deepEqual(other.ok ? null : other.code, 'forbidden');
  });

  it('refuses missing, malformed, wrongly signed and expired tokens as unauthorized', async () => {
    const verifier = createTokenVerifier({ secret });
    const wrong = await signToken('another secret entirely, also long', {
      user: 'ann',
      doc: '*',
      access: 'write',
      ttlSeconds: 60,
    });
    const expired = await new SignJWT({ doc: '*', access: 'write' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('ann')
      .setExpirationTime(Math.floor(Date.now() / 1000) - 10)
      .sign(Buffer.from(secret));
    const noExp = await new SignJWT({ doc: '*', access: 'write' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('ann')
      .sign(Buffer.from(secret));
    const badAccess = await new SignJWT({ doc: '*', access: 'admin' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('ann')
      .setExpirationTime('1h')
      .sign(Buffer.from(secret));
    const unsigned = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"sub":"a","doc":"*","access":"write","exp":9999999999}').toString('base64url')}.`;
    for (const [token, what] of [
      [undefined, 'missing'],
      ['', 'empty'],
      [42, 'not a string'],
      ['not.a.jwt', 'malformed'],
      [wrong, 'wrongly signed'],
      [expired, 'expired'],
      [noExp, 'without exp'],
      [badAccess, 'bad access claim'],
      [unsigned, 'alg none'],
      ['x'.repeat(10_000), 'too long'],
    ] as const) {
      const outcome = await verifier.verify(token, 'doc');
      assert.equal(outcome.ok ? 'granted' : outcome.code, 'unauthorized', what);
    }
  });

  it('requires the audience and issuer it is given, and only then', async () => {
    const verifier = createTokenVerifier({
      secret,
      audience: 'scriptorium',
      issuer: 'https://id.example',
    });
    const claims = { user: 'ann', doc: '*', access: 'write', ttlSeconds: 60 } as const;
    const own = await signToken(secret, {
      ...claims,
      audience: 'scriptorium',
      issuer: 'https://id.example',
    });
    assert.ok((await verifier.verify(own, 'd')).ok);
    // `aud` may be a list naming several applications.
    const listed = await new SignJWT({ doc: '*', access: 'write' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('ann')
      .setAudience(['wiki', 'scriptorium'])
      .setIssuer('https://id.example')
      .setExpirationTime('1h')
      .sign(Buffer.from(secret));
    assert.ok((await verifier.verify(listed, 'd')).ok);
    for (const [what, extra] of [
      ['neither', {}],
      ['another audience', { audience: 'wiki', issuer: 'https://id.example' }],
      ['no issuer', { audience: 'scriptorium' }],
      ['another issuer', { audience: 'scriptorium', issuer: 'https://other.example' }],
    ] as const) {
      const outcome = await verifier.verify(await signToken(secret, { ...claims, ...extra }), 'd');
      assert.equal(outcome.ok ? 'granted' : outcome.code, 'unauthorized', what);
      assert.match(outcome.ok ? '' : outcome.message, /"(aud|iss)" claim/, what);
    }
    // Without them, a token carrying any is taken as before.
    const plain = createTokenVerifier({ secret });
    assert.ok((await plain.verify(own, 'd')).ok);
  });

  it('verifies EdDSA tokens with a public key', async () => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const verifier = createTokenVerifier({
      publicKey: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    });
    const token = await new SignJWT({ doc: 'd', access: 'write' })
      .setProtectedHeader({ alg: 'EdDSA' })
      .setSubject('bob')
      .setExpirationTime('1h')
      .sign(privateKey);
    const outcome = await verifier.verify(token, 'd');
    assert.ok(outcome.ok && outcome.grant.user === 'bob');
    // A token signed with the public key as an HMAC secret must not pass (algorithm confusion).
    const confused = await signToken(publicKey.export({ type: 'spki', format: 'pem' }).toString(), {
      user: 'eve',
      doc: '*',
      access: 'write',
      ttlSeconds: 60,
    });
    assert.equal((await verifier.verify(confused, 'd')).ok, false);
  });

  it('reads scopes and durations', () => {
    assert.ok(scopeAllows('*', 'x'));
    assert.ok(scopeAllows('a*', 'abc'));
    assert.ok(!scopeAllows('a*', 'bac'));
    assert.ok(scopeAllows('abc', 'abc'));
    assert.ok(!scopeAllows('abc', 'abcd'));
    assert.equal(parseDuration('90s'), 90);
    assert.equal(parseDuration('1h'), 3600);
    assert.equal(parseDuration('7d'), 604_800);
    assert.equal(parseDuration('1y'), null);
    assert.equal(parseDuration('h'), null);
  });
});
