import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Transform } from 'prosemirror-transform';
import { errors } from '../../../schema/errors.js';
import { schema } from '../../../schema/index.js';
import { defaults } from '../../../server/config.js';
import { FileStore } from '../../../server/stores/file/file_store.js';
import { openEditor } from '../../support/editors.js';
import {
  assertCoded,
  deepJson,
  deepText,
  noAdmissionLimits,
  readServed,
  wrapSteps,
} from '../../support/hostile.js';
import { startServer, type TestServer } from '../../support/server.js';
import { ask } from '../../support/socket.js';
import {
  batch,
  deepStepCase,
  image,
  insertBlocks,
  insertInline,
  link,
  type MessageCase,
  mutated,
  p,
  seed,
  small,
  stepCase,
  templates,
  text,
  wordRange,
} from '../../fixtures/hostile/build.js';
import { handshakeCases, messageCases } from '../../fixtures/hostile/cases.js';
import {
  assertOutcome,
  Corpus,
  handshake,
  rawGet,
  toCtx,
  within,
} from '../../support/hostile_harness.js';

// The hostile corpus: every event and every step type, with the attacks of the hostile-input
// issue. Each case states the code it must be answered with; after each, the document's
// version and content must be what they were (or, for the few cases that are accepted, what the
// accepted steps made of it), and an honest editor on the real client library must still edit
// and be acknowledged. Most cases run against small limits, to stay fast; the attacks that
// crashed the server (nested wraps, deep attribute values, huge images, big batches on a big
// document) also run at the default limits.

describe('hostile corpus (small limits)', () => {
  let server: TestServer;
  let corpus: Corpus;
  before(async () => {
    server = await startServer(small);
    corpus = new Corpus(server.url, 'hostile-corpus');
    await corpus.open();
    const state = corpus.honest.state!;
    corpus.honest.dispatch(state.tr.replaceWith(0, state.doc.content.size, seed.content));
    await within(corpus.honest.settled(), 'the honest editor');
  });
  after(async () => {
    corpus.close();
    await server.close();
  });

  it(`has at least 150 cases (${handshakeCases.length + messageCases.length + 3})`, () => {
    assert.ok(handshakeCases.length + messageCases.length + 3 >= 150);
  });

  it('answers every handshake case with its code and changes nothing', async () => {
    for (const c of handshakeCases) {
      const before = await corpus.served();
      const outcome = await handshake(server.url, c);
      if (c.expect === 'connected') {
        assert.equal(outcome.connected, true, `${c.name}: connects`);
        if (c.binds) {
          assert.equal((await fetch(`${server.url}/docs/${c.binds.doc}`)).status, 200);
          assert.equal((await fetch(`${server.url}/docs/${c.binds.not}`)).status, 404);
        }
      } else {
        assert.equal(outcome.connected, undefined, `${c.name}: refused`);
        const data = outcome.connectError as {
          code?: string;
          retryable?: boolean;
          message?: string;
        };
        assert.equal(data.code, c.expect, `${c.name}: ${JSON.stringify(data)}`);
        assert.equal(
          data.retryable,
          errors[c.expect].retryable,
          `${c.name}: retryable as in the table`,
        );
        if (c.message) assert.match(data.message ?? '', c.message, c.name);
        else assert.equal(data.message, errors[c.expect].message, c.name);
      }
      assert.deepEqual(await corpus.served(), before, `${c.name}: the document is unchanged`);
      await corpus.honestEdit(c.name);
    }
  });

  it('answers every message case with its code; refused ones change nothing', async () => {
    for (const c of messageCases) {
      const before = await corpus.served();
      const outcome = await corpus.send(c, toCtx(before));
      assertOutcome(c, outcome, before);
      const after = await corpus.served();
      if (c.expect === 'accepted') {
        assert.equal(after.version, (outcome.ack as { version: number }).version, c.name);
        c.check?.(after);
      } else {
        assert.deepEqual(after, before, `${c.name}: version and content unchanged`);
      }
      await corpus.honestEdit(c.name);
    }
    // Nothing above made the server drop a room or quarantine a document.
    assert.equal(server.server.rooms.roomFailures, 0, 'no room failed');
    assert.equal(server.server.rooms.corruptLoads, 0);
  });

  it('refuses a rebased batch whole when one of its steps no longer maps (stale)', async () => {
    // The honest editor writes "zap me" and the attacker prepares a batch at that version: a
    // typed letter (which still maps) and a mark on "zap" (which will not).
    await corpus.honestEdit('prepare');
    corpus.honest.dispatch(corpus.honest.state!.tr.insert(0, p('zap me')));
    await within(corpus.honest.settled(), 'the honest editor');
    const old = toCtx(await corpus.served());
    const zap = wordRange(old.doc, 'zap');
    const steps = [
      templates.replace(old),
      { stepType: 'addMark', mark: { type: 'strong' }, from: zap.from + 1, to: zap.to + 1 },
    ];
    // The honest editor deletes "zap" first.
    corpus.honest.dispatch(corpus.honest.state!.tr.delete(zap.from, zap.to));
    await within(corpus.honest.settled(), 'the honest editor');
    const before = await corpus.served();
    assertCoded(
      await ask(corpus.attacker, 'steps', { version: old.version, steps }),
      'stale',
      'partly rebasable batch',
    );
    assert.deepEqual(await corpus.served(), before, 'no step of the batch was applied');
    await corpus.honestEdit('after a partly rebasable batch');
  });

  it('refuses a resent batch as stale instead of applying it twice', async () => {
    const ctx = toCtx(await corpus.served());
    const message = { version: ctx.version, steps: [templates.replace(ctx)] };
    const first = await ask<{ ok: boolean; version: number }>(corpus.attacker, 'steps', message);
    assert.deepEqual(first, { ok: true, version: ctx.version + 1 });
    const before = await corpus.served();
    assertCoded(await ask(corpus.attacker, 'steps', message), 'stale', 'a resent batch');
    assert.deepEqual(await corpus.served(), before);
    await corpus.honestEdit('after a resend');
  });

  it('answers HTTP requests for ids . and .. with bad-document-id', async () => {
    // node:http, because fetch resolves dot segments (even %2E%2E) before sending.
    for (const id of ['%2E', '%2E%2E', '.%2E']) {
      const { status, body } = await rawGet(server.port, `/docs/${id}`);
      assert.equal(status, 400, id);
      assert.equal((JSON.parse(body) as { code: string }).code, 'bad-document-id');
    }
    await corpus.honestEdit('after HTTP');
  });
});

describe('hostile corpus (default limits)', () => {
  let server: TestServer;
  let dataDir: string;
  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'scriptorium-hostile-'));
    server = await startServer(noAdmissionLimits, new FileStore({ dataDir }));
  });
  after(async () => {
    await server.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('nested blockquotes by real wraps stop at maxDocDepth; the document still loads and restarts', async () => {
    const corpus = new Corpus(server.url, 'wraps');
    await corpus.open();
    try {
      await corpus.honestEdit('start');
      let ctx = toCtx(await corpus.served());
      // 2,000 wraps at once: over maxStepsPerBatch, and more than twice maxMessageBytes on the
      // wire, so Engine.IO closes the connection before any handler sees it.
      const twoThousand = wrapSteps(ctx.doc, 2000);
      assert.ok(JSON.stringify(twoThousand).length > 2 * defaults.maxMessageBytes);
      const closed = stepCase('2,000 wraps', 'disconnected', () => twoThousand);
      assertOutcome(closed, await corpus.send(closed, ctx), await corpus.served());
      // As many wraps as fit in one message: refused at the first wrap too deep, or by the time
      // budget before it (which comes first depends on the machine).
      const fitting = wrapSteps(ctx.doc, 300);
      assert.ok(JSON.stringify(fitting).length < defaults.maxMessageBytes);
      await corpus.ensureAttacker();
      const many = await ask<{ code?: string }>(corpus.attacker, 'steps', {
        version: ctx.version,
        steps: fitting,
      });
      assert.ok(['too-deep', 'too-large'].includes(many.code!), JSON.stringify(many));
      assertCoded(many, many.code!, '300 wraps');
      assert.equal((await corpus.served()).version, ctx.version, 'nothing applied');
      // One wrap per batch: accepted until the text would sit deeper than maxDocDepth (48).
      // The text starts at level 2 (doc, paragraph, text), so 46 wraps fit.
      let accepted = 0;
      for (let i = 0; i < 200; i++) {
        ctx = toCtx(await corpus.served());
        const answer = await ask<{ ok: boolean; code?: string }>(corpus.attacker, 'steps', {
          version: ctx.version,
          steps: wrapSteps(ctx.doc, 1),
        });
        if (!answer.ok) {
          assertCoded(answer, 'too-deep', 'the wrap past the limit');
          break;
        }
        accepted++;
      }
      assert.equal(accepted, 46, 'wraps accepted up to maxDocDepth');
      const deep = await corpus.served();
      // A new editor loads the deepest document the limits allow, and the honest one edits it.
      const late = openEditor(server.url, 'wraps', { clientID: 'late' });
      await within(late.ready(), 'a new editor');
      assert.deepEqual(JSON.parse(JSON.stringify(late.state!.doc.toJSON())), deep.doc);
      late.close();
      await corpus.honestEdit('at maxDocDepth');
    } finally {
      corpus.close();
    }
    // The snapshot written on shutdown loads in a new server.
    const served = await readServed(server.url, 'wraps');
    await server.close();
    server = await startServer(noAdmissionLimits, new FileStore({ dataDir }));
    assert.deepEqual(await readServed(server.url, 'wraps'), served);
  });

  it('refuses attribute values nested 5,000 deep', async () => {
    const corpus = new Corpus(server.url, 'deep-attrs');
    await corpus.open();
    try {
      const state = corpus.honest.state!;
      corpus.honest.dispatch(state.tr.replaceWith(0, state.doc.content.size, seed.content));
      await within(corpus.honest.settled(), 'the honest editor');
      const deepCases: MessageCase[] = [
        deepStepCase(
          'attr value nested 5,000 deep',
          'too-deep',
          mutated('attr', { value: '<<deep>>' }),
          deepText(5000, '3'),
        ),
        deepStepCase(
          'attr value of objects nested 5,000 deep',
          'too-deep',
          mutated('attr', { value: '<<deep>>' }),
          deepText(5000, '3', 'level'),
        ),
        deepStepCase(
          'link title nested 5,000 deep',
          'too-deep',
          mutated('addMark', { mark: link('https://example.com', { title: '<<deep>>' }) }),
          deepText(5000, '"t"'),
        ),
        deepStepCase(
          'image alt nested 5,000 deep',
          'too-deep',
          (ctx) => insertInline(ctx, image('https://example.com/a.png', { alt: '<<deep>>' })),
          deepText(5000, '"a"', 'alt'),
        ),
        deepStepCase(
          'a slice nested 5,000 deep in content',
          'too-deep',
          () => insertBlocks('<<deep>>'),
          deepText(5000, '{"type":"paragraph"}', 'content'),
        ),
        stepCase(
          'heading level nested 100 deep (within the message limit)',
          'invalid-step',
          mutated('attr', { value: deepJson(100, 3) }),
        ),
      ];
      for (const c of deepCases) {
        const before = await corpus.served();
        assertOutcome(c, await corpus.send(c, toCtx(before)), before);
        assert.deepEqual(await corpus.served(), before, c.name);
        await corpus.honestEdit(c.name);
      }
    } finally {
      corpus.close();
    }
  });

  it('big images: over the transport cap the connection closes, over maxAttributeBytes they are refused, and many allowed ones stop at maxDocBytes', async (t) => {
    const corpus = new Corpus(server.url, 'images');
    await corpus.open();
    t.after(() => corpus.close());
    await corpus.honestEdit('start');
    const src = (bytes: number) => `data:image/png;base64,${'A'.repeat(bytes)}`;
    const cases: MessageCase[] = [
      stepCase('an image with a 3.9 MB src', 'disconnected', (ctx) =>
        insertInline(ctx, image(src(3_900_000))),
      ),
      stepCase('an image with a src over maxAttributeBytes', 'too-large', (ctx) =>
        insertInline(ctx, image(src(defaults.maxAttributeBytes + 100))),
      ),
      stepCase('a message over maxMessageBytes (but under twice it)', 'too-large', (ctx) =>
        insertInline(ctx, ...Array.from({ length: 20 }, () => image(src(4_000)))),
      ),
      stepCase('100 images with 400-byte srcs in one batch', 'accepted', (ctx) =>
        insertInline(ctx, ...Array.from({ length: 100 }, () => image(src(400)))),
      ),
    ];
    for (const c of cases) {
      const before = await corpus.served();
      assertOutcome(c, await corpus.send(c, toCtx(before)), before);
      if (c.expect !== 'accepted') assert.deepEqual(await corpus.served(), before, c.name);
      await corpus.honestEdit(c.name);
    }
    // 100 messages of one image each with a src just under maxAttributeBytes: accepted until
    // the document would pass maxDocBytes, refused after.
    let accepted = 0;
    let refused = 0;
    const ctx = toCtx(await corpus.served());
    for (let i = 0; i < 100; i++) {
      // Each image goes to the start of the first paragraph, which stays where it is.
      const answer = await ask<{ ok: boolean; version: number }>(
        corpus.attacker,
        'steps',
        batch(ctx, insertInline(ctx, image(src(defaults.maxAttributeBytes - 100))))[0],
      );
      if (answer.ok) {
        assert.equal(refused, 0, 'nothing is accepted after the first refusal');
        ctx.version = answer.version;
        accepted++;
      } else {
        assertCoded(answer, 'too-large', `image message ${i}`);
        refused++;
      }
    }
    assert.ok(accepted >= 20 && refused >= 30, `accepted ${accepted}, refused ${refused}`);
    const served = await corpus.served();
    assert.ok(
      JSON.stringify(served.doc).length <= defaults.maxDocBytes,
      'the document stays within maxDocBytes',
    );
    await corpus.honestEdit('after the images');
  });

  it('on a 150 KB document: bold over all of it is accepted; the biggest batches a message holds are applied or refused whole; past the limits they are refused', async (t) => {
    const corpus = new Corpus(server.url, 'full');
    await corpus.open();
    t.after(() => corpus.close());
    // About 150 KB of paragraphs, in messages under maxMessageBytes.
    for (let part = 0; part < 4; part++) {
      const ctx = toCtx(await corpus.served());
      const paragraphs = Array.from({ length: 300 }, (_, i) => ({
        type: 'paragraph',
        content: [text(`p${part}-${i} `.padEnd(70, 'lorem ipsum '))],
      }));
      const answer = await ask<{ ok: boolean }>(corpus.attacker, 'steps', {
        version: ctx.version,
        steps: [
          {
            stepType: 'replace',
            from: ctx.doc.content.size,
            to: ctx.doc.content.size,
            slice: { content: paragraphs },
          },
        ],
      });
      assert.equal(answer.ok, true, JSON.stringify(answer));
    }
    let before = await corpus.served();
    assert.ok(JSON.stringify(before.doc).length > 140_000);
    let ctx = toCtx(before);
    const starts = () => {
      const found: number[] = [];
      ctx.doc.forEach((_node, offset) => found.push(offset + 1));
      return found;
    };
    const typing = (count: number) => {
      const at = starts();
      const tr = new Transform(ctx.doc);
      for (let i = 0; i < count; i++)
        tr.insert(tr.mapping.map(at[(i * 2) % at.length]!), schema.text('x'));
      return tr.steps.map((step) => step.toJSON());
    };
    const bolding = (count: number) => {
      const at = starts();
      return Array.from({ length: count }, (_, i) => ({
        stepType: 'addMark',
        mark: { type: 'em' },
        from: at[i]!,
        to: at[i]! + 1,
      }));
    };
    // Past the limits: 1,000 typed steps are over maxMessageBytes; a markSet (what undoing a
    // mark change sends) of 12,000 mark steps is over twice that and closes the connection.
    assertCoded(
      await ask(corpus.attacker, 'steps', { version: ctx.version, steps: typing(1000) }),
      'too-large',
      '1,000 steps',
    );
    assert.deepEqual(await corpus.served(), before);
    const marks = stepCase('markSet of 12,000', 'disconnected', () => ({
      stepType: 'markSet',
      steps: Array.from({ length: 12 }, () => bolding(1000)).flat(),
    }));
    assertOutcome(marks, await corpus.send(marks, ctx), before);
    assert.deepEqual(await corpus.served(), before);
    // One step, however long it takes, is never refused by the time budget: bold over the
    // whole document is accepted.
    await corpus.ensureAttacker();
    const bold = await ask<{ ok: boolean; version: number }>(corpus.attacker, 'steps', {
      version: ctx.version,
      steps: [{ stepType: 'addMark', mark: { type: 'strong' }, from: 0, to: ctx.doc.content.size }],
    });
    assert.deepEqual(bold, { ok: true, version: ctx.version + 1 });
    before = await corpus.served();
    ctx = toCtx(before);
    // The biggest batches that fit in one message: whether they finish within maxApplyMs
    // depends on the machine, but each is applied whole (every step, one answer) or refused whole
    // (too-large, nothing changed).
    const biggest: [string, () => unknown[]][] = [
      ['600 typed steps', () => typing(600)],
      ['a markSet of 800 mark steps', () => [{ stepType: 'markSet', steps: bolding(800) }]],
    ];
    for (const [name, make] of biggest) {
      const steps = make();
      assert.ok(JSON.stringify(steps).length < defaults.maxMessageBytes, name);
      await corpus.ensureAttacker();
      const answer = await ask<{ ok: boolean; version?: number; code?: string }>(
        corpus.attacker,
        'steps',
        { version: ctx.version, steps },
      );
      const after = await corpus.served();
      if (answer.ok) {
        // Versions count steps (a markSet is one step): the whole batch, in one answer.
        assert.equal(answer.version, ctx.version + steps.length, name);
        assert.equal(after.version, ctx.version + steps.length, name);
      } else {
        assertCoded(answer, 'too-large', name);
        assert.deepEqual(after, before, name);
      }
      before = after;
      ctx = toCtx(after);
    }
    await corpus.honestEdit('after the big batches');
  });
});
