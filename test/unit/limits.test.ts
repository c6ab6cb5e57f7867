import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { EditorState } from 'prosemirror-state';
import { Random } from '../../client-sim/random.js';
import { randomEdit } from '../../client-sim/workload.js';
import { measureJson, unlimitedJson } from '../../schema/json_limits.js';
import { emptyDoc, schema } from '../../schema/index.js';
import { isSafeImageUrl, isSafeLinkUrl } from '../../schema/url.js';
import { type StepJSON } from '../../schema/events.js';
import { nodeStats, bytesDelta } from '../../schema/doc_size.js';
import { Authority } from '../../server/core/authority.js';
import { checkChanged } from '../../server/core/doc_check.js';
import { stepProblem } from '../../server/core/step_check.js';

const limits = {
  maxHistorySteps: 10_000,
  maxHistoryBytes: 64 * 1024 * 1024,
  maxStepsPerBatch: 1000,
  maxDocSize: 1_000_000,
  maxDocBytes: 16 * 1024 * 1024,
  maxDocDepth: 48,
  maxApplyMs: 60_000,
  maxRebaseSteps: 1000,
};

function nested(depth: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = i % 2 ? [value] : { a: value };
  return value;
}

describe('measureJson', () => {
  it('counts the size of JSON text exactly for ASCII without escapes, and never above it', () => {
    fc.assert(
      fc.property(fc.json({ maxDepth: 6 }), (text) => {
        const value: unknown = JSON.parse(text);
        const measured = measureJson(value, unlimitedJson);
        assert.ok(measured.ok);
        const json = JSON.stringify(value);
        // Never above: clients size their batches by the JSON they send.
        assert.ok(measured.bytes <= Buffer.byteLength(json), `${measured.bytes} > ${json}`);
        // Exact where no string holds an escape or a character beyond ASCII.
        const plain = (string: string) => /^[\x20-\x7e]*$/.test(string) && !/["\\]/.test(string);
        const strings: string[] = [];
        JSON.parse(json, (key, item: unknown) => {
          strings.push(key);
          if (typeof item === 'string') strings.push(item);
          return item;
        });
        if (strings.every(plain)) assert.equal(measured.bytes, json.length, json);
      }),
      { numRuns: 300 },
    );
  });

  it('counts depth as the value’s nesting, refusing one level past the limit', () => {
    const limit = { maxDepth: 10, maxBytes: Infinity, maxStringBytes: Infinity };
    assert.equal(measureJson(nested(10), limit).ok, true);
    const refused = measureJson(nested(11), limit);
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.code, 'too-deep');
  });

  it('refuses a value nested 200,000 deep without overflowing the stack', () => {
    const deep = JSON.parse('['.repeat(200_000) + ']'.repeat(200_000)) as unknown;
    const refused = measureJson(deep, { maxDepth: 128, maxBytes: Infinity, maxStringBytes: 10 });
    assert.equal(!refused.ok && refused.code, 'too-deep');
  });

  it('limits strings except a text node’s text, and bytes overall', () => {
    const opts = { maxDepth: 10, maxBytes: 1000, maxStringBytes: 5 };
    assert.equal(measureJson({ text: 'long text is fine' }, opts).ok, true);
    const attr = measureJson({ attrs: { href: 'https://x' } }, opts);
    assert.equal(!attr.ok && attr.code, 'too-large');
    const big = measureJson({ text: 'x'.repeat(2000) }, opts);
    assert.equal(!big.ok && big.code, 'too-large');
  });

  it('refuses what JSON cannot carry', () => {
    const opts = { maxDepth: 10, maxBytes: 1000, maxStringBytes: 100 };
    const binary = measureJson({ data: Buffer.from('x') }, opts);
    assert.equal(!binary.ok && binary.code, 'bad-request');
    const fn = measureJson([() => 1], opts);
    assert.equal(!fn.ok && fn.code, 'bad-request');
  });
});

describe('safe URLs', () => {
  it('lets links be http(s), mailto or relative, and nothing that runs script', () => {
    for (const ok of [
      'https://a.example/x?y#z',
      'http://a',
      'mailto:a@b.c',
      '/d/x',
      'x.html',
      '#top',
    ]) {
      assert.ok(isSafeLinkUrl(ok), ok);
    }
    for (const bad of [
      'javascript:alert(1)',
      'JavaScript:alert(1)',
      'java\tscript:alert(1)',
      ' javascript:alert(1)',
      '\u0001javascript:alert(1)',
      'vbscript:x',
      'data:text/html,<script>alert(1)</script>',
      'file:///etc/passwd',
      '',
    ]) {
      assert.ok(!isSafeLinkUrl(bad), JSON.stringify(bad));
    }
  });

  it('lets images be http(s), relative or raster data URLs', () => {
    assert.ok(isSafeImageUrl('https://a.example/i.png'));
    assert.ok(isSafeImageUrl('/i.png'));
    assert.ok(isSafeImageUrl('data:image/png;base64,iVBORw0KGgo='));
    assert.ok(!isSafeImageUrl('data:image/svg+xml;base64,PHN2Zz4='));
    assert.ok(!isSafeImageUrl('data:text/html;base64,PGI+'));
    assert.ok(!isSafeImageUrl('javascript:alert(1)'));
    assert.ok(!isSafeImageUrl('mailto:a@b.c'));
  });

  it('is what the schema enforces on links and images', () => {
    assert.throws(() => schema.mark('link', { href: 'javascript:alert(1)' }));
    // Before and after a safe URL was seen: the validators' memory never admits null.
    assert.throws(() => schema.mark('link', { href: null }));
    assert.ok(schema.mark('link', { href: 'https://a.example/x' }));
    assert.throws(() => schema.mark('link', { href: null }));
    assert.throws(() => schema.node('image', { src: null }));
    assert.throws(() => schema.node('image', { src: 'javascript:alert(1)' }));
    assert.throws(() => schema.node('heading', { level: 9 }));
    assert.throws(() =>
      schema.node('ordered_list', { order: 1.5 }, [
        schema.node('list_item', null, [schema.node('paragraph')]),
      ]),
    );
    assert.ok(schema.mark('link', { href: 'https://a.example' }));
  });
});

describe('stepProblem', () => {
  it('refuses positions that are not whole numbers ≥ 0 and ranges that run backwards', () => {
    const cases: [StepJSON, string | null][] = [
      [{ stepType: 'replace', from: 1, to: 1 }, null],
      [{ stepType: 'replace', from: 2, to: 1 }, 'from must not be after to'],
      [{ stepType: 'replace', from: 1.5, to: 2 }, 'from must be a whole number ≥ 0'],
      [{ stepType: 'replace', from: -1, to: 2 }, 'from must be a whole number ≥ 0'],
      [{ stepType: 'addMark', from: 1, to: 2 ** 60 }, 'to must be a whole number ≥ 0'],
      [
        { stepType: 'replaceAround', from: 0, to: 10, gapFrom: 1, gapTo: 11, insert: 0 },
        'the gap must lie inside from–to',
      ],
      [{ stepType: 'attr', pos: 0, attr: 'level', value: 2 }, null],
      [
        { stepType: 'replace', from: 0, to: 0, slice: { openStart: 0.5 } },
        'openStart and openEnd must be whole numbers ≥ 0',
      ],
      [{ stepType: 'mystery' }, 'unknown step type mystery'],
    ];
    for (const [json, expected] of cases)
      assert.equal(stepProblem(json), expected, JSON.stringify(json));
  });
});

describe('document bytes and depth', () => {
  it('tracks the size of the JSON within 10% through random edits, with no drift from step to step, as the client measures it too', () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const random = new Random(seed);
      let state = EditorState.create({ schema, doc: emptyDoc() });
      let tracked = nodeStats(state.doc).bytes;
      for (let i = 0; i < 400; i++) {
        const tr = randomEdit(state, random);
        if (!tr) continue;
        let doc = state.doc;
        for (const step of tr.steps) {
          const next = step.apply(doc).doc!;
          const delta = checkChanged(next, doc).bytesDelta;
          // The client's measure of a step (`bytesDelta`), against which it drops the steps a
          // full document would refuse: one byte apart, it would drop a step the server takes.
          assert.equal(bytesDelta(next, doc), delta, `seed ${seed}, edit ${i}`);
          tracked += delta;
          doc = next;
        }
        state = state.apply(tr);
      }
      assert.equal(tracked, nodeStats(state.doc).bytes, `seed ${seed}: the running total drifted`);
      const actual = JSON.stringify(state.doc.toJSON()).length;
      assert.ok(
        Math.abs(tracked - actual) <= actual * 0.1,
        `seed ${seed}: ${tracked} vs ${actual}`,
      );
    }
  });

  it('refuses the step that nests past the depth limit, not the batch after it', () => {
    const authority = new Authority(emptyDoc(), 0, { ...limits, maxDocDepth: 10 });
    let accepted = 0;
    for (let i = 0; i < 20; i++) {
      const state = EditorState.create({ doc: authority.doc });
      const tr = state.tr.wrap(state.doc.resolve(1).blockRange()!, [
        { type: schema.nodes.blockquote! },
      ]);
      const outcome = authority.receive(authority.version, [tr.steps[0]!.toJSON()], 'a');
      if (!outcome.ok) {
        assert.equal(outcome.code, 'too-deep');
        break;
      }
      accepted++;
    }
    // doc > blockquote × n > an empty paragraph at level n + 1.
    assert.equal(accepted, 9);
    assert.ok(nodeStats(authority.doc).height <= 10);
  });

  it('stops a batch at the step that crosses the byte limit', () => {
    const authority = new Authority(emptyDoc(), 0, { ...limits, maxDocBytes: 4096 });
    const paragraph = schema.node('paragraph', null, [schema.text('x'.repeat(500))]);
    // Each step appends a 500-character paragraph at the end: the eighth crosses 4 KiB.
    const steps: StepJSON[] = [];
    let end = authority.doc.content.size;
    for (let i = 0; i < 30; i++) {
      steps.push({
        stepType: 'replace',
        from: end,
        to: end,
        slice: { content: [paragraph.toJSON()] },
      } as StepJSON);
      end += paragraph.nodeSize;
    }
    const outcome = authority.receive(0, steps, 'a');
    assert.equal(outcome.ok, false);
    assert.equal(!outcome.ok && outcome.code, 'too-large');
    assert.match(!outcome.ok ? outcome.message : '', /^Step 7 /);
    // How much the document before the batch may still grow, in the measure it was refused by.
    assert.deepEqual(!outcome.ok && outcome.code === 'too-large' && outcome.room, {
      bytes: 4096 - nodeStats(emptyDoc()).bytes,
      positions: limits.maxDocSize - emptyDoc().nodeSize,
    });
    assert.equal(authority.version, 0, 'nothing applied');
    assert.ok(authority.receive(0, steps.slice(0, 7), 'a').ok, 'seven fit');
  });

  it('refuses an attribute step naming an attribute the node does not define', () => {
    const authority = new Authority(emptyDoc(), 0, limits);
    const outcome = authority.receive(
      0,
      [{ stepType: 'attr', pos: 0, attr: 'onclick', value: 'x' }],
      'a',
    );
    assert.equal(!outcome.ok && outcome.code, 'invalid-step');
    const doc = authority.receive(0, [{ stepType: 'docAttr', attr: 'x', value: 1 }], 'a');
    assert.equal(!doc.ok && doc.code, 'invalid-step');
    assert.equal(authority.version, 0);
  });

  it('cuts the history by bytes as well as by steps', () => {
    const authority = new Authority(emptyDoc(), 0, { ...limits, maxHistoryBytes: 64 * 1024 });
    for (let i = 0; i < 100; i++) {
      const state = EditorState.create({ doc: authority.doc });
      const step = state.tr.insertText('y'.repeat(2000), 1).steps[0]!.toJSON();
      assert.ok(authority.receive(authority.version, [step], 'a').ok);
    }
    assert.equal(authority.stepsSince(0), null, 'the oldest steps are gone');
    const kept = authority.stepsSince(authority.version - 20);
    assert.ok(kept, 'recent steps are kept');
    assert.ok(JSON.stringify(kept.steps).length < 64 * 1024);
  });
});
