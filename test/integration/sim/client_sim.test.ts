import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { FullEditor } from '../../../client-sim/full_editor.js';
import { LightEditor } from '../../../client-sim/light_editor.js';
import { OptionError, parseSimArgs, validateOptions } from '../../../client-sim/options.js';
import { ServerUnavailableError } from '../../../client-sim/server_http.js';
import { Random } from '../../../client-sim/random.js';
import { Replica } from '../../../client-sim/replica.js';
import { summaryTable } from '../../../client-sim/report.js';
import { fetchDocument } from '../../../client-sim/server_http.js';
import { parseEnvPairs } from '../../../client-sim/server_process.js';
import { SwarmSlice, type SliceMessage } from '../../../client-sim/slice.js';
import { runSwarm } from '../../../client-sim/swarm.js';
import { WindowRecorder, type SliceWindow } from '../../../client-sim/window_recorder.js';
import { schema } from '../../../schema/index.js';
import { startServer, type TestServer } from '../../support/server.js';
import { delay, waitFor } from '../../support/wait.js';

/// A swarm slice in this thread with two light editors of `docId` typing at `ratePerSec`, and
/// a function that waits for its next message of a type.
function sliceOfTwo(
  url: string,
  docId: string,
  ratePerSec: number,
): {
  slice: SwarmSlice;
  reply: <T extends SliceMessage['type']>(type: T) => Promise<Extract<SliceMessage, { type: T }>>;
} {
  const messages: SliceMessage[] = [];
  const waiters: (() => void)[] = [];
  const slice = new SwarmSlice(
    {
      url,
      schemaModule: null,
      rttMs: 0,
      windowMs: 1000,
      editors: [0, 1].map((i) => ({
        docId,
        clientID: `${docId}-${i}`,
        kind: 'light' as const,
        ratePerSec,
        seed: 20 + i,
      })),
    },
    (message) => {
      messages.push(message);
      for (const wake of waiters.splice(0)) wake();
    },
  );
  const reply = async <T extends SliceMessage['type']>(type: T) => {
    for (;;) {
      const found = messages.find((m) => m.type === type || m.type === 'failed');
      if (found) {
        messages.splice(messages.indexOf(found), 1);
        assert.notEqual(found.type, 'failed', JSON.stringify(found));
        return found as Extract<SliceMessage, { type: T }>;
      }
      await new Promise<void>((resolve) => waiters.push(resolve));
    }
  };
  return { slice, reply };
}

/// Connects `slice`'s editors and lets them edit for `ms`.
async function editFor(
  slice: SwarmSlice,
  reply: ReturnType<typeof sliceOfTwo>['reply'],
  ms: number,
): Promise<void> {
  slice.handle({ type: 'connect', timeoutMs: 10_000 });
  assert.deepEqual((await reply('connected')).failures, []);
  slice.handle({ type: 'start', atMs: Date.now() });
  // Elapsed time is the behaviour: the swarm edits for `ms`.
  await delay(ms);
}

describe('client-sim: a short swarm against a real server', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('6 editors on 2 documents converge and report consistent numbers', async () => {
    const result = await runSwarm({
      url: server.url,
      levels: [6],
      docs: 2,
      fullPerDoc: 2,
      durationSec: 4,
      windowMs: 1000,
      warmupWindows: 1,
      seed: 7,
    });
    assert.equal(result.converged, true);
    assert.equal(result.levels.length, 1);
    const level = result.levels[0]!;
    assert.deepEqual(level.convergence.failures, []);
    assert.equal(
      level.convergence.checked,
      6,
      'two full editors and the light editors’ replica on each of two documents',
    );
    assert.equal(level.editors, 6);
    assert.equal(level.fullEditors, 4);
    assert.equal(level.lightEditors, 2);
    assert.equal(level.workers, 0);

    const totals = level.totals;
    assert.ok(totals.edits > 50, `only ${totals.edits} edits were made`);
    assert.ok(totals.edits >= totals.confirmed);
    assert.ok(totals.sends >= totals.confirmed / 50, 'edits reached the wire');
    assert.equal(totals.confirmed + totals.dropped, totals.edits, 'every edit was confirmed');
    assert.equal(level.windowsAddUp, true, 'window counts add up to the running totals');
    const sum = (pick: (w: (typeof level.windows)[number]) => number) =>
      level.windows.reduce((s, w) => s + pick(w), 0);
    assert.equal(
      sum((w) => w.confirmed),
      totals.confirmed,
    );
    assert.equal(
      sum((w) => w.latency?.count ?? 0),
      totals.confirmed,
      'one sample per edit',
    );

    // 4 s of 1 s windows aligned to the start, one of them warm-up: none lost at the end.
    assert.equal(level.steady.windows, 3, 'every complete window after the warm-up is steady');
    for (const window of level.windows) {
      if (window.steady) assert.equal(window.connected, 6);
      assert.ok(window.refusalShare >= 0 && window.refusalShare <= 1);
      const latency = window.latency;
      if (!latency) continue;
      assert.ok(latency.p50Ms > 0);
      assert.ok(latency.p50Ms <= latency.p90Ms);
      assert.ok(latency.p90Ms <= latency.p99Ms);
      assert.ok(latency.p99Ms <= latency.maxMs);
    }
    const steady = level.steady;
    assert.ok(steady.latency !== null);
    assert.ok(steady.latency.p50Ms <= steady.latency.p90Ms);
    assert.ok(steady.latency.p90Ms <= steady.latency.p99Ms);
    assert.ok(steady.latency.p99Ms <= steady.latency.maxMs);
    assert.ok(steady.refusalShare >= 0 && steady.refusalShare <= 1);
    for (const share of Object.values(steady.refusalShares)) assert.ok(share >= 0 && share <= 1);
    // 6 editors at 4–6 edits/s offer 24–36 edits/s; the loopback server keeps up.
    assert.ok(steady.editsPerSec > 15 && steady.editsPerSec < 45, `${steady.editsPerSec} edits/s`);
    assert.ok(steady.confirmedPerSec > 10, `${steady.confirmedPerSec} confirmed/s`);
    // An idle simulator keeps its schedule: the edits made are the edits offered.
    assert.equal(level.state, 'steady');
    assert.ok(steady.offeredPerSec > 15 && steady.offeredPerSec < 45);
    const row = summaryTable(result).split('\n')[2]!;
    assert.ok(
      // Then the server's processing and hold, unknown here (no server window matched).
      row.endsWith(
        `| ${steady.offeredPerSec.toFixed(1)} | ${steady.editsPerSec.toFixed(1)} | – | – | – |`,
      ),
      `offered and made, then processing and hold, at the end of the summary row: ${row}`,
    );
    assert.equal(result.serverMetrics, true, 'the server offers /metrics/windows');
    // The server's windows are 10 s long and this run's 1 s: none starts at the same moment.
    assert.equal(steady.server, null);
  });

  it('checks light editors’ documents too: a swarm of light editors only is checked', async () => {
    const result = await runSwarm({
      url: server.url,
      levels: [6],
      docs: 2,
      fullPerDoc: 0,
      durationSec: 2,
      windowMs: 1000,
      warmupWindows: 0,
      seed: 13,
    });
    const level = result.levels[0]!;
    assert.equal(level.fullEditors, 0);
    assert.deepEqual(level.convergence.failures, []);
    assert.equal(level.convergence.checked, 2, 'one replica of each document');
    assert.equal(level.convergence.unchecked, false);
    assert.equal(result.converged, true);
    assert.match(summaryTable(result), /\| yes \(2\) \|/);
  });

  it('reports a light editors’ replica that differs from the server’s document', async (t) => {
    const docId = 'sim-replica-check';
    const { slice, reply } = sliceOfTwo(server.url, docId, 10);
    t.after(async () => {
      slice.handle({ type: 'close' });
      await reply('closed');
    });
    await editFor(slice, reply, 600);
    slice.handle({ type: 'stop', drainTimeoutMs: 5000 });
    assert.ok((await reply('stopped')).totals.confirmed > 0, 'edits were made');
    const served = await fetchDocument(server.url, docId);
    assert.ok(served.version > 0);

    slice.handle({ type: 'check', docs: [{ docId, ...served }], timeoutMs: 5000 });
    const same = (await reply('checked')).checks;
    assert.deepEqual(
      same.map((c) => [c.clientID, c.converged]),
      [['replica', true]],
    );

    // The server's document as it would be had one edit gone missing on the way to it.
    const other = { type: 'doc', content: [{ type: 'paragraph' }] };
    slice.handle({ type: 'check', docs: [{ docId, ...served, doc: other }], timeoutMs: 5000 });
    const differs = (await reply('checked')).checks;
    assert.equal(differs.length, 1);
    assert.equal(differs[0]!.converged, false);
    assert.match(differs[0]!.detail, /document differs from the server's at version \d+/);
  });

  it('does not take a replica whose editors were closed with batches in flight for a divergence', async (t) => {
    // An overloaded run's drain gives up: the editors still waiting for a batch are closed,
    // their batches may land afterwards, and their replica hears no more broadcasts. It cannot
    // reach the server's version: it is left out of the check, not reported as diverged.
    const docId = 'sim-undrained';
    const { slice, reply } = sliceOfTwo(server.url, docId, 30);
    t.after(async () => {
      slice.handle({ type: 'close' });
      await reply('closed');
    });
    await editFor(slice, reply, 600);
    // Private state, read to stop at the moment the test is about: both editors waiting.
    const light = (slice as unknown as { light: { inFlight: unknown }[] }).light;
    await waitFor(() => light.every((editor) => editor.inFlight), 'both editors to wait');
    slice.handle({ type: 'stop', drainTimeoutMs: 0 });
    assert.equal((await reply('stopped')).undrained, 2);
    // Elapsed time: the stopped editors' batches in flight are left to land before the read.
    await delay(500);
    const served = await fetchDocument(server.url, docId);
    slice.handle({ type: 'check', docs: [{ docId, ...served }], timeoutMs: 5000 });
    const checks = (await reply('checked')).checks;
    assert.deepEqual(
      checks.filter((check) => !check.converged),
      [],
    );
  });

  it('counts the time an edit waited for a busy simulator thread in its latency', async () => {
    const docId = 'sim-late-edits';
    const recorded = (): { recorder: WindowRecorder; windows: SliceWindow[] } => {
      const windows: SliceWindow[] = [];
      const recorder = new WindowRecorder(
        600_000,
        () => 0,
        (window) => windows.push(window),
      );
      recorder.start();
      return { recorder, windows };
    };
    const light = recorded();
    const full = recorded();
    const lightEditor = new LightEditor({
      url: server.url,
      clientID: 'late-light',
      ratePerSec: 2,
      rttMs: 0,
      random: new Random(3),
      replica: new Replica(docId, schema),
      recorder: light.recorder,
    });
    const fullEditor = new FullEditor({
      url: server.url,
      schema,
      docId,
      clientID: 'late-full',
      ratePerSec: 2,
      rttMs: 0,
      random: new Random(4),
      recorder: full.recorder,
    });
    try {
      await lightEditor.joinedOnce();
      await fullEditor.client.ready();
      lightEditor.start(0);
      fullEditor.start(0);
      // Each person's first edit is due within 500 ms (2 edits/s); the thread is busy for
      // 800 ms, so it is made at least 300 ms late, and that wait is part of what the person
      // waits for (on loopback the confirmation itself takes a few ms).
      const until = performance.now() + 800;
      while (performance.now() < until);
      // Elapsed time: the edit timers that came due during the busy loop fire now.
      await delay(20);
      lightEditor.stop();
      fullEditor.stop();
      await waitFor(() => lightEditor.drained && fullEditor.drained, 'the edits confirmed', 10_000);
    } finally {
      lightEditor.close();
      fullEditor.close();
      light.recorder.stop();
      full.recorder.stop();
    }
    for (const [kind, { windows }] of Object.entries({ light, full })) {
      const window = windows.at(-1)!;
      assert.ok(window.confirmed >= 1, `${kind}: ${window.confirmed} edits confirmed`);
      const maxMs = window.latencyUs.max / 1000;
      assert.ok(maxMs >= 300, `${kind}: the late edit's latency is ${maxMs} ms`);
    }
  });

  it('counts a full editor’s edit it could not make as made and dropped', async () => {
    const nowhere = await startServer();
    const deadUrl = nowhere.url;
    await nowhere.close();
    const cases = [
      // Never loaded: nothing answers at the address.
      { url: deadUrl, docId: 'sim-unloaded', status: /connecting|offline/ },
      // Failed: the server refuses the document id for good.
      { url: server.url, docId: 'not a document id', status: /failed/ },
    ];
    for (const { url, docId, status } of cases) {
      const windows: SliceWindow[] = [];
      const recorder = new WindowRecorder(
        600_000,
        () => 0,
        (window) => windows.push(window),
      );
      recorder.start();
      const editor = new FullEditor({
        url,
        schema,
        docId,
        clientID: `unmade-${docId}`,
        ratePerSec: 20,
        rttMs: 0,
        random: new Random(9),
        recorder,
      });
      try {
        if (url === server.url) await editor.client.ready().catch(() => {});
        assert.match(editor.client.status, status);
        editor.start(0);
        // Elapsed time is the behaviour: the editor edits for 300 ms.
        await delay(300);
        editor.stop();
      } finally {
        editor.close();
        recorder.stop();
      }
      const totals = recorder.totals;
      assert.ok(totals.edits >= 3, `${docId}: ${totals.edits} edits counted`);
      assert.equal(totals.dropped, totals.edits, `${docId}: every one dropped`);
      assert.equal(windows.at(-1)!.dropped, totals.edits);
    }
  });

  it('spreads editors over worker threads and merges their windows', async () => {
    const result = await runSwarm({
      url: server.url,
      levels: [8],
      docs: 2,
      fullPerDoc: 1,
      durationSec: 3,
      windowMs: 1000,
      warmupWindows: 0,
      workers: 2,
      seed: 11,
    });
    const level = result.levels[0]!;
    assert.equal(level.workers, 2);
    assert.equal(result.converged, true, level.convergence.failures.join('; '));
    assert.equal(level.convergence.checked, 4, 'a full editor and a replica per document');
    assert.equal(level.windowsAddUp, true);
    const samples = level.windows.reduce((s, w) => s + (w.latency?.count ?? 0), 0);
    assert.equal(samples, level.totals.confirmed, 'histograms crossed the threads whole');
    assert.ok(level.totals.confirmed > 30, `${level.totals.confirmed} edits confirmed`);
  });
});

describe('client-sim: options and a missing server', () => {
  it('refuses bad options with a message naming the option', () => {
    assert.throws(
      () => parseSimArgs(['--bogus']),
      (err: Error) => {
        assert.ok(err instanceof OptionError);
        assert.match(err.message, /--bogus/);
        return true;
      },
    );
    assert.throws(() => parseSimArgs(['--editors', 'ten']), /--editors must be a whole number/);
    assert.throws(
      () => parseSimArgs(['--editors', '0']),
      /--editors must be a whole number from 1/,
    );
    assert.throws(() => parseSimArgs(['--rate', 'fast']), /--rate must be a number/);
    assert.throws(() => parseSimArgs(['--rate', '0']), /--rate must be from/);
    assert.throws(() => parseSimArgs(['--ramp', '10,x']), /--ramp must be a whole number/);
    assert.throws(() => parseSimArgs(['--editors', '5', '--ramp', '5,6']), /not both/);
    assert.throws(() => parseSimArgs(['--editors', '2', '--docs', '3']), /Every document needs/);
    assert.throws(() => parseSimArgs(['--url', 'ftp://x']), /--url must be http/);
    assert.throws(() => validateOptions({ workers: -1 }), OptionError);
    const parsed = parseSimArgs(['--ramp', '10,15', '--rtt', '50', '--json', 'out.json']);
    assert.deepEqual(parsed.levels, [10, 15]);
    assert.equal(parsed.rttMs, 50);
    assert.equal(parsed.jsonFile, 'out.json');
    assert.equal(parseSimArgs(['--help']).help, true);
  });

  it('refuses a server environment variable the server does not read', () => {
    // The server ignores names it does not know: a typo ran the default server while the
    // bench's report printed the typo as the server's environment.
    assert.throws(
      () => parseEnvPairs(['MAX_REBASE_STEP=0']),
      (err: Error) => {
        assert.equal(
          err.message,
          '--server-env: the server reads no MAX_REBASE_STEP (did you mean MAX_REBASE_STEPS?); its settings are listed in server/settings.ts and docs/configuration.md',
        );
        return true;
      },
    );
    assert.throws(
      () => parseEnvPairs(['FLUSH_INTERVAL=0'], '--env'),
      /did you mean FLUSH_INTERVAL_MS/,
    );
    assert.throws(
      () => parseEnvPairs(['WIDGETS=3'], '--env'),
      /^Error: --env: the server reads no WIDGETS;/,
    );
    assert.throws(() => parseEnvPairs(['MAX_REBASE_STEPS']), /takes KEY=VALUE/);
    // Its settings, and what Node itself reads, as the benches pass them.
    assert.deepEqual(
      parseEnvPairs([
        'MAX_REBASE_STEPS=0',
        'FLUSH_INTERVAL_MS=0',
        'NODE_OPTIONS=--max-old-space-size=512',
      ]),
      { MAX_REBASE_STEPS: '0', FLUSH_INTERVAL_MS: '0', NODE_OPTIONS: '--max-old-space-size=512' },
    );
    // The bench stops before starting anything, with the message and exit code 1.
    const bench = spawnSync(
      process.execPath,
      [
        fileURLToPath(new URL('../../../client-sim/bench.js', import.meta.url)),
        '--only',
        'reference',
        '--server-env',
        'MAX_REBASE_STEP=0',
      ],
      { encoding: 'utf8', timeout: 20_000 },
    );
    assert.equal(bench.status, 1);
    assert.match(
      bench.stderr,
      /^bench: --server-env: the server reads no MAX_REBASE_STEP \(did you mean MAX_REBASE_STEPS\?\)/,
    );
  });

  it('exits 1 when its editors cannot join, instead of waiting for ever', async (t) => {
    // A server that needs tokens, which the simulator does not send: every join is refused.
    // The slice's window recorder was started anyway and never stopped, and its timer kept
    // the process alive after the failure was printed.
    const server = await startServer({ authSecret: 'a secret of at least thirty-two bytes!!' });
    t.after(() => server.close());
    const sim = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          fileURLToPath(new URL('../../../client-sim/main.js', import.meta.url)),
          '--url',
          server.url,
          '--editors',
          '2',
          '--duration',
          '5',
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let stderr = '';
      child.stderr.on('data', (chunk) => (stderr += chunk));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, stderr });
      });
    });
    assert.equal(sim.code, 1, sim.stderr);
    assert.match(sim.stderr, /2 of 2 sockets could not join/);
  });

  it('fails fast with a clear error when no server answers', async () => {
    // A port that was free a moment ago: nothing listens there.
    const probe = await startServer();
    const url = probe.url;
    await probe.close();
    const started = Date.now();
    await assert.rejects(runSwarm({ url, levels: [2], durationSec: 1 }), (err: Error) => {
      assert.ok(err instanceof ServerUnavailableError);
      assert.match(err.message, /No Scriptorium server at http:\/\/127\.0\.0\.1:\d+/);
      return true;
    });
    assert.ok(Date.now() - started < 5000, 'the probe gives up quickly');
  });
});
