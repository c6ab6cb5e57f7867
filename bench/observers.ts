import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { EditorState } from 'prosemirror-state';
import { io, type Socket } from 'socket.io-client';
import { Step } from 'prosemirror-transform';
import { schema } from '../schema/index.js';
import {
  type DocJSON,
  type StepsAnswer,
  type StepsBroadcast,
  type SyncAnswer,
} from '../schema/events.js';
import {
  cpuProbeArgs,
  parseEnvPairs,
  ProbeCpuSamples,
  startServerProcess,
} from '../client-sim/server_process.js';
import { fixed } from './measured_run.js';
import { ask } from './socket_ask.js';

// `npm run bench:observers`: one writer, many read-only observers on one document. The writer
// types at `--rate` edits per second; every observer notes when each broadcast reaches it.
// Propagation = the moment the writer made the edit to the moment an observer has the
// broadcast, over every (edit, observer) pair of the steady span. Writer and observers share
// this process (one clock), the server is a child with the CPU probe; both share the machine's
// two cores, so the figure includes the simulator taking its turn to read 1,000 sockets.

// How long a join or a batch may wait for its answer before the run fails.
const answerMs = 30_000;

const usage = `Usage: npm run bench:observers -- [options]

  --observers N   read-only sockets (default 1000)
  --rate R        the writer's edits per second (default 5)
  --duration S    editing seconds; the first 5 are warm-up (default 30)
  --env KEY=VALUE extra server environment (repeatable)
`;

function socketFor(url: string, clientID: string, readOnly: boolean): Socket {
  return io(url, {
    transports: ['websocket'],
    forceNew: true,
    reconnection: false,
    query: { doc: 'observed' },
    auth: { clientID, readOnly },
  });
}

/// The run's settings from the command line; null when `--help` was asked (usage printed).
/// Throws for a value out of range.
function parseOptions(): {
  observers: number;
  rate: number;
  duration: number;
  env: Record<string, string>;
} | null {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    strict: true,
    options: {
      observers: { type: 'string', default: '1000' },
      rate: { type: 'string', default: '5' },
      duration: { type: 'string', default: '30' },
      env: { type: 'string', multiple: true, default: [] },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(usage);
    return null;
  }
  const observers = Number(values.observers);
  const rate = Number(values.rate);
  const duration = Number(values.duration);
  if (!Number.isInteger(observers) || observers < 1) throw new Error('--observers: a count');
  if (!(rate > 0)) throw new Error('--rate: a positive number');
  if (!Number.isInteger(duration) || duration < 10) throw new Error('--duration: at least 10');
  const env = { MAX_CONNECTIONS_PER_IP: '0', ...parseEnvPairs(values.env, '--env') };
  return { observers, rate, duration, env };
}

/// What the observers saw: when each version was made, and while `counting`, the delay of
/// every broadcast that reached one.
interface Propagation {
  us: RecordableHistogram;
  made: Map<number, number>;
  counting: boolean;
  deliveries: number;
  missing: number;
}

/// Connects `observers` read-only sockets (into `sockets`) in groups of 50, so that the
/// handshakes do not all land at once, each recording into `propagation`. Throws when one
/// cannot join.
async function joinObservers(
  url: string,
  observers: number,
  sockets: Socket[],
  propagation: Propagation,
): Promise<void> {
  for (let i = 0; i < observers; i += 50) {
    const group: Promise<unknown>[] = [];
    for (let j = i; j < Math.min(observers, i + 50); j++) {
      const socket = socketFor(url, `observer-${j}`, true);
      sockets.push(socket);
      socket.on('steps', (message: StepsBroadcast) => {
        if (!propagation.counting) return;
        const at = propagation.made.get(message.version);
        if (at === undefined) {
          propagation.missing++;
          return;
        }
        propagation.deliveries++;
        propagation.us.record(Math.max(1, Math.round((performance.now() - at) * 1000)));
      });
      group.push(ask<SyncAnswer>(socket, 'join', {}, answerMs));
    }
    const answers = (await Promise.all(group)) as SyncAnswer[];
    if (answers.some((answer) => !answer.ok)) throw new Error('an observer could not join');
  }
}

/// What the writer did.
interface WriterCounts {
  edits: number;
  refused: number;
  skipped: number;
}

/// Starts the writer on its joined socket: one insert per beat at `rate` per second, the next
/// one after its answer came back, each version's moment noted in `made`. Returns its counts
/// and the function that stops it.
function startWriter(
  writer: Socket,
  joined: { doc: DocJSON; version: number },
  rate: number,
  made: Map<number, number>,
): { counts: WriterCounts; stop: () => void } {
  let state = EditorState.create({ doc: schema.nodeFromJSON(joined.doc) });
  let version = joined.version;
  writer.on('steps', (message: StepsBroadcast) => {
    for (const json of message.steps) {
      const result = Step.fromJSON(schema, json).apply(state.doc);
      if (result.doc) state = EditorState.create({ doc: result.doc, selection: state.selection });
    }
    version = message.version;
  });
  const counts: WriterCounts = { edits: 0, refused: 0, skipped: 0 };
  let inFlight = false;
  const beat = setInterval(() => {
    // One batch in flight, as an editor has: a beat that finds the last one unanswered is
    // skipped (and counted), so each version maps to the moment of its edit.
    if (inFlight) {
      counts.skipped++;
      return;
    }
    inFlight = true;
    // Somewhere in the first paragraph (the new document's only block), which grows by a
    // character per edit.
    const room = state.doc.firstChild!.content.size;
    const tr = state.tr.insertText('x', 1 + Math.floor(Math.random() * Math.min(room + 1, 5)));
    made.set(version + tr.steps.length, performance.now());
    counts.edits++;
    void ask<StepsAnswer>(
      writer,
      'steps',
      { version, steps: tr.steps.map((step) => step.toJSON()) },
      answerMs,
    ).then((answer) => {
      inFlight = false;
      if (!answer.ok) counts.refused++;
    });
  }, 1000 / rate);
  return { counts, stop: () => clearInterval(beat) };
}

async function main(): Promise<number> {
  const options = parseOptions();
  if (!options) return 0;
  const { observers, rate, duration } = options;
  const server = await startServerProcess(options.env, { nodeArgs: cpuProbeArgs, ipc: true });
  const cpu = new ProbeCpuSamples(server.child);
  const sockets: Socket[] = [];
  try {
    const writer = socketFor(server.url, 'writer', false);
    sockets.push(writer);
    const joined = await ask<SyncAnswer>(writer, 'join', {}, answerMs);
    if (!joined.ok || !('doc' in joined)) throw new Error('the writer could not join');

    const propagation: Propagation = {
      us: createHistogram(),
      made: new Map(),
      counting: false,
      deliveries: 0,
      missing: 0,
    };
    await joinObservers(server.url, observers, sockets, propagation);
    console.log(`${observers} observers joined`);

    const { counts, stop } = startWriter(writer, joined, rate, propagation.made);
    await new Promise((resolve) => setTimeout(resolve, 5000));
    propagation.counting = true;
    const fromMs = Date.now();
    await new Promise((resolve) => setTimeout(resolve, (duration - 5) * 1000));
    stop();
    await new Promise((resolve) => setTimeout(resolve, 2000));
    propagation.counting = false;
    const toMs = Date.now() - 2000;
    await cpu.stop();
    const cpuMs = cpu.cpuMsBetween(fromMs, toMs);
    const us = propagation.us;
    const pct = (p: number) => (us.count === 0 ? null : us.percentile(p) / 1000);
    console.log(
      `${observers} observers, writer at ${rate}/s: ${counts.edits} edits (${counts.refused} refused, ${counts.skipped} beats skipped), ${propagation.deliveries} deliveries counted, ${propagation.missing} unmatched`,
    );
    console.log(
      `propagation p50/p90/p99/max ${fixed(pct(50), 1)}/${fixed(pct(90), 1)}/${fixed(
        pct(99),
        1,
      )}/${fixed(us.count === 0 ? null : us.max / 1000, 1)} ms, server CPU ${fixed(
        cpuMs === null ? null : cpuMs / ((toMs - fromMs) / 1000),
        0,
      )} ms/s`,
    );
    return counts.refused > 0 ? 1 : 0;
  } finally {
    for (const socket of sockets) socket.close();
    await server.stop();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  },
);
