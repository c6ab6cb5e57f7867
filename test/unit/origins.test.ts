import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  hostAllowed,
  hostIsLocal,
  originAllowed,
  parseOrigins,
} from '../../server/protocol/origins.js';

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

  it('in open mode, answers only under a host no other site can have (DNS rebinding)', () => {
    // A page on a name the attacker points at this server sends that name as Host, and as
    // Origin or (same-origin over plain http) no Origin at all.
    assert.ok(!originAllowed('http://attacker.example:4000', 'attacker.example:4000', [], true));
    assert.ok(!originAllowed(undefined, 'attacker.example:4000', [], true));
    assert.ok(originAllowed('http://attacker.example:4000', 'attacker.example:4000', [], false));
    assert.ok(originAllowed(undefined, 'attacker.example:4000', [], false));
    for (const host of ['127.0.0.1:4000', 'localhost:4000', 'app.localhost', '[::1]:4000']) {
      assert.ok(hostIsLocal(host), host);
      assert.ok(originAllowed(`http://${host}`, host, [], true), host);
    }
    for (const host of ['attacker.example', 'localhost.attacker.example:80', 'example', '[::1']) {
      assert.ok(!hostIsLocal(host), host);
    }
    // An open server served under a name of its own lists it in ALLOWED_ORIGINS.
    const allowed = parseOrigins('https://collab.example');
    assert.ok(originAllowed('https://collab.example', 'collab.example', allowed, true));
    assert.ok(hostAllowed('Collab.Example', allowed));
    assert.ok(!hostAllowed('collab.example:8080', allowed));
  });

  it('refuses entries that are not origins', () => {
    assert.throws(() => parseOrigins('https://a.example/path'), /not an origin/);
    assert.throws(() => parseOrigins('a.example'), /not an origin/);
    assert.throws(() => parseOrigins('ftp://a.example'), /not an origin/);
    assert.deepEqual(parseOrigins(''), []);
  });
});
