import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { errors } from '../../schema/errors.js';
import { settingRows, type Setting } from '../../server/settings.js';

// The wire protocol's document says it is enough to write a client in another language:
// it must name every error code a client can receive and every HTTP route the server has.

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

  it("docs/protocol.md's summary lists every error code", () => {
    const summary = section(read('docs/protocol.md'), '## In short');
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

// README is a path a newcomer walks in order, BENCHMARKS.md the results; the reference they
// link to must be where they say.

/// The markdown files a reader is sent between: the top-level ones and docs/.
const markdownFiles = [
  'README.md',
  'CONTRIBUTING.md',
  'BENCHMARKS.md',
  'bench-results/NOTES.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/// The anchors GitHub gives the headings of `markdown`: lower case, punctuation dropped,
/// spaces as hyphens, a repeated heading numbered from -1.
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  for (const [, title] of markdown.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6} (.+)$/gm)) {
    const slug = title!
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    found.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return found;
}

describe('the README and the reference', () => {
  it('keeps README.md to 250 lines and BENCHMARKS.md to 300', () => {
    assert.ok(read('README.md').split('\n').length <= 251, 'README.md');
    assert.ok(read('BENCHMARKS.md').split('\n').length <= 301, 'BENCHMARKS.md');
  });

  it('walks the README in order: quick start, the library, standalone, history, deploy, reference', () => {
    const headings = [...read('README.md').matchAll(/^## (.+)$/gm)].map((match) => match[1]);
    assert.deepEqual(headings, [
      'Quick start',
      'Use it in your app',
      'Run it standalone',
      'History',
      'Deploy',
      'Reference',
    ]);
    assert.ok(read('README.md').includes('](docs/two-editors.png)'), 'the picture');
  });

  it('links only to files and headings that exist', () => {
    for (const file of markdownFiles) {
      const text = read(file).replace(/```[\s\S]*?```/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const [path, anchor] = target!.split('#') as [string, string | undefined];
        const linked = path === '' ? file : normalize(join(dirname(file), path));
        assert.ok(existsSync(join(root, linked)), `${file} links to ${target}: no ${linked}`);
        if (anchor && linked.endsWith('.md')) {
          assert.ok(anchors(read(linked)).has(anchor), `${file} links to ${target}: no heading`);
        }
      }
    }
  });
});

/// The cells of a markdown table row, trimmed (`| a | b |` → `['a', 'b']`).
function cells(row: string): string[] {
  return row
    .split('|')
    .slice(1, -1)
    .map((cell) => cell.trim());
}

/// The row docs/configuration.md should have for a setting: every cell but the meaning.
function expectedCells(option: string, row: Setting<unknown>): string[] {
  const shown = row.shown === '—' || row.shown === 'host name' ? row.shown : `\`${row.shown}\``;
  const range = row.range ? `${row.range[0]}–${row.range[1]}` : '—';
  return [`\`${row.env}\``, `\`${option}\``, shown, range, row.scope];
}

describe('the configuration reference', () => {
  const page = read('docs/configuration.md');
  const table = page
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map(cells);

  it('docs/configuration.md lists every setting of server/settings.ts, in order, and no other', () => {
    assert.deepEqual(
      table.map((row) => row[0]),
      settingRows.map(([, row]) => `\`${row.env}\``),
    );
  });

  it('gives each setting its option name, default, range and scope, and a meaning', () => {
    for (const [index, [option, row]] of settingRows.entries()) {
      const expected = expectedCells(option, row);
      const found = table[index] ?? [];
      assert.deepEqual(
        found.slice(0, expected.length),
        expected,
        `the line of ${row.env} should start | ${expected.join(' | ')} |`,
      );
      assert.ok((found[expected.length] ?? '') !== '', `a meaning for ${row.env}`);
    }
  });

  it('the README links to it', () => {
    assert.match(read('README.md'), /\]\(docs\/configuration\.md\)/);
  });
});
