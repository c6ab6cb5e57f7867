import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import express from 'express';
import { createWebRouter } from '../../../server/app/web.js';

// The bundle's source maps stay on the server, however the path to them is spelt: the check
// decides on the file the static server would serve, after decoding and normalisation.

/// GETs `path` exactly as written (no client-side normalisation): the status and body.
function getRaw(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('static files', () => {
  let dir: string;
  let http: Server;
  let port: number;
  const map = '{"version":3,"sources":["/build/machine/secret.ts"]}';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'scriptorium-static-'));
    await writeFile(join(dir, 'main.js'), 'console.log(1)\n');
    await writeFile(join(dir, 'main.js.map'), map);
    await writeFile(join(dir, 'style.css'), 'body{}\n');
    await writeFile(join(dir, 'index.html'), '<!doctype html>');
    const app = express();
    app.use(createWebRouter({ bundleDir: dir }));
    app.use((_req, res) => {
      res.status(404).send('not here');
    });
    http = createServer(app);
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    port = (http.address() as AddressInfo).port;
  });

  after(async () => {
    await new Promise<void>((resolve) => http.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  });

  it('serves the script and the style', async () => {
    assert.equal((await getRaw(port, '/assets/main.js')).status, 200);
    assert.equal((await getRaw(port, '/assets/style.css')).status, 200);
  });

  for (const path of [
    '/assets/main.js.map',
    '/assets/main.js.map/.',
    '/assets/main.js.map/./',
    '/assets/x/../main.js.map',
    '/assets/main.js.map/x/..',
    '/assets/main.js.map%2F.',
    '/assets/main.js.ma%70',
    '/assets/MAIN.JS.MAP',
    '/assets/./main.js.map',
    '/assets//main.js.map',
    '/assets/index.html',
    '/assets/index.html/.',
    '/assets/x/../index.html',
  ]) {
    it(`does not serve ${path}`, async () => {
      const answer = await getRaw(port, path);
      assert.notEqual(answer.status, 200, path);
      assert.ok(!answer.body.includes('secret.ts'), path);
      assert.ok(!answer.body.includes('<!doctype html>'), path);
    });
  }
});
