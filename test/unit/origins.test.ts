import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { originAllowed, parseOrigins } from '../../server/protocol/origins.js';

describe('origins', () => {
  it('admits the server’s own origin and clients without one by default', () => {
    assert.ok(originAllowed(undefined, 'a.example', []));
    assert.ok(originAllowed('https://a.example', 'a.example', []));
    assert.ok(originAllowed('http://localhost:4000', 'localhost:4000', []));
    assert.ok(!originAllowed('https://evil.example', 'a.example', []));
    assert.ok(!originAllowed('https://a.example.evil.example', 'a.example', []));
    assert.ok(!originAllowed('null', 'a.example', []));
  });

  it('admits the configured origins besides its own when a list is set', () => {
    const allowed = parseOrigins('https://app.example.com, http://localhost:3000');
    assert.ok(originAllowed('https://app.example.com', 'api.example.com', allowed));
    assert.ok(originAllowed('http://localhost:3000', 'api.example.com', allowed));
    assert.ok(originAllowed('https://api.example.com', 'api.example.com', allowed));
    assert.ok(!originAllowed('https://evil.example', 'api.example.com', allowed));
    assert.ok(!originAllowed('http://localhost:3001', 'api.example.com', allowed));
  });

  it('refuses entries that are not origins', () => {
    assert.throws(() => parseOrigins('https://a.example/path'), /not an origin/);
    assert.throws(() => parseOrigins('a.example'), /not an origin/);
    assert.throws(() => parseOrigins('ftp://a.example'), /not an origin/);
    assert.deepEqual(parseOrigins(''), []);
  });
});
