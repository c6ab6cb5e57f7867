// How long the authority takes to accept one typing step, by document size: parse, apply,
// schema check, history. Run with `npm run bench:authority`.
import { EditorState } from 'prosemirror-state';
import { createHistogram } from 'node:perf_hooks';
import { schema } from '../schema/index.js';
import { type StepJSON } from '../schema/events.js';
import { Authority } from '../server/core/authority.js';

function documentOfSize(bytes: number) {
  const paragraphs = [];
  const text = 'The quick brown fox jumps over the lazy dog. ';
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const marks = i % 5 === 0 ? [schema.marks.strong!.create()] : [];
    paragraphs.push(schema.node('paragraph', null, [schema.text(text.repeat(4), marks)]));
    size += text.length * 4 + 40;
  }
  return schema.node('doc', null, paragraphs);
}

const limits = {
  maxHistorySteps: 10_000,
  maxStepsPerBatch: 1000,
  maxDocSize: 100_000_000,
  maxHistoryBytes: 1024 * 1024 * 1024,
  maxDocBytes: 256 * 1024 * 1024,
  maxDocDepth: 48,
  maxApplyMs: 60_000,
  maxRebaseSteps: 1000,
};
console.log(`node ${process.version}`);
console.log('| document | JSON size | p50 (µs) | p99 (µs) | of which check() p50 (µs) |');
console.log('|---|---|---|---|---|');
for (const bytes of [10_000, 100_000, 1_000_000]) {
  const doc = documentOfSize(bytes);
  const authority = new Authority(doc, 0, limits);
  const total = createHistogram();
  const check = createHistogram();
  const rounds = bytes >= 1_000_000 ? 2_000 : 10_000;
  for (let i = 0; i < rounds; i++) {
    const pos = 1 + (i % 50);
    const step = EditorState.create({ doc: authority.doc })
      .tr.insertText('x', pos)
      .steps[0]!.toJSON() as StepJSON;
    const t0 = process.hrtime.bigint();
    const outcome = authority.receive(authority.version, [step], 'bench');
    const t1 = process.hrtime.bigint();
    if (!outcome.ok) throw new Error(outcome.message);
    total.record(Number(t1 - t0) || 1);
    const c0 = process.hrtime.bigint();
    authority.doc.check();
    check.record(Number(process.hrtime.bigint() - c0) || 1);
  }
  const size = JSON.stringify(authority.doc.toJSON()).length;
  const us = (ns: number) => (ns / 1000).toFixed(1);
  console.log(
    `| ${bytes / 1000} KB | ${(size / 1000).toFixed(0)} KB | ${us(total.percentile(50))} | ${us(total.percentile(99))} | ${us(check.percentile(50))} |`,
  );
}
