import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { errors } from '../../schema/index.js';

// The wire protocol's documents say they are enough to write a client in another language:
// they must name every error code a client can receive and every HTTP route the server has.

const root = fileURLToPath(new URL('../../../', import.meta.url));
const read = (file: string): string => readFileSync(join(root, file), 'utf8');

/// The text of `markdown` from the heading `title` to the next heading of the same level.
function section(markdown: string, title: string): string {
  const start = markdown.indexOf(`\n${title}\n`);
  assert.ok(start >= 0, `a section ${title}`);
  const level = /^#+/.exec(title)![0];
  const end = markdown.indexOf(`\n${level} `, start + title.length + 1);
  return markdown.slice(start, end === -1 ? undefined : end);
}

describe('the protocol documents', () => {
  const codes = Object.keys(errors);

  it('docs/protocol.md lists every error code of schema/errors.ts', () => {
    const list = section(read('docs/protocol.md'), '## Error codes');
    for (const code of codes) assert.ok(list.includes(`\`${code}\``), code);
  });

  it("the README's protocol summary lists every error code", () => {
    const summary = section(read('README.md'), '## Protocol in short');
    const sentence = /Error codes: ([^.]+)\./.exec(summary)?.[1] ?? '';
    for (const code of codes) assert.ok(sentence.includes(`\`${code}\``), code);
  });

  it("docs/protocol.md's HTTP table has every route of the standalone server's HTTP app", () => {
    const table = section(read('docs/protocol.md'), '## HTTP');
    const routes = [...read('server/app/http.ts').matchAll(/app\.get\('([^']+)'/g)].map(
      (match) => match[1]!,
    );
    assert.ok(routes.length >= 3, routes.join(', '));
    for (const route of routes) assert.ok(table.includes(`\`GET ${route}\``), route);
  });
});
