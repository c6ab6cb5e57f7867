import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EditorState } from 'prosemirror-state';
import { emptyDoc } from '../../../schema/index.js';
import { startServerWithFakeClock } from '../../support/server.js';
import { ask, rawSocket } from '../../support/socket.js';
import { parsePrometheusText, sampleValue } from '../../support/prometheus_text.js';

describe('a batch held for its flush', () => {
  let server: Awaited<ReturnType<typeof startServerWithFakeClock>>;
  before(async () => {
    // Always under pressure (busy 0), gathering the whole ceiling: the second and third
    // batches wait for the flush after the first's, 300 ms after it.
    server = await startServerWithFakeClock(Date.UTC(2026, 0, 1, 12, 0, 0), {
      flushIntervalMs: 300,
      flushUsPerSocket: 1_000_000,
      flushBusyPercent: 0,
    });
  });
  after(async () => {
    await server.close();
  });

  it('shows its hold apart from the time spent on it, in the window and in /metrics', async (t) => {
    const a = rawSocket(server.url, 'held', 'a');
    const b = rawSocket(server.url, 'held', 'b');
    t.after(() => {
      a.close();
      b.close();
    });
    await ask(a, 'join', {});
    await ask(b, 'join', {});
    const first = EditorState.create({ doc: emptyDoc() }).tr.insertText('one', 1);
    const second = EditorState.create({ doc: first.doc }).tr.insertText('two', 1);
    const third = EditorState.create({ doc: second.doc }).tr.insertText('six', 1);
    const json = (tr: typeof first) => tr.steps.map((step) => step.toJSON());
    assert.deepEqual(await ask(a, 'steps', { version: 0, steps: json(first) }), {
      ok: true,
      version: 1,
    });
    const startedAt = performance.now();
    const answers = await Promise.all([
      ask(b, 'steps', { version: 1, steps: json(second) }),
      ask(a, 'steps', { version: 2, steps: json(third) }),
    ]);
    assert.deepEqual(answers, [
      { ok: true, version: 2 },
      { ok: true, version: 3 },
    ]);
    assert.ok(performance.now() - startedAt >= 100, 'the two batches were held');

    assert.equal(server.advance(10_000), 1);
    const response = await fetch(`${server.url}/metrics/windows?last=1`);
    const window = ((await response.json()) as { windows: Record<string, number | null>[] })
      .windows[0]!;
    assert.equal(window['batchesAccepted'], 3);
    const hold = window['holdP99Ms']!;
    const processing = window['processingP99Ms']!;
    const latency = window['latencyP99Ms']!;
    assert.ok(hold >= 100, `hold p99 ${hold} ms: the held batches waited for the flush`);
    assert.ok(processing < hold, `processing p99 ${processing} ms leaves the hold out`);
    assert.ok(latency >= hold, `latency p99 ${latency} ms still holds it`);
    assert.ok(window['holdP50Ms']! <= hold && window['processingP50Ms']! <= processing);

    const families = parsePrometheusText(await (await fetch(`${server.url}/metrics`)).text());
    const bucket = (name: string, le: string): number =>
      sampleValue(families, `scriptorium_${name}_bucket`, { le });
    assert.equal(bucket('batch_hold_seconds', '+Inf'), 3, 'every accepted batch has a hold');
    assert.ok(bucket('batch_hold_seconds', '0.1') <= 1, 'two were held past 100 ms');
    assert.equal(bucket('steps_processing_seconds', '+Inf'), 3);
    assert.ok(
      sampleValue(families, 'scriptorium_steps_processing_seconds_sum') <
        sampleValue(families, 'scriptorium_batch_hold_seconds_sum'),
      'the time spent is less than the time held',
    );
  });
});
