import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { cpus } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { io, type Socket } from 'socket.io-client';
import { floodKinds } from './flooder.js';

// A victim's step round trip on one document while hostile clients flood another with one
// message type, against the same without the flood. The server, the flooders and the victim
// are three processes; flood and no-flood runs alternate, so that a machine shared with other
// work weighs on both alike, and the table quotes the median over rounds of each run's p50 and
// max.
//
//   npm run bench:floods                 (ROUNDS=3 RUN_MS=3000 FLOOD_SOCKETS=4)

const rounds = Number(process.env['ROUNDS'] ?? 3);
const runMs = Number(process.env['RUN_MS'] ?? 3_000);
const floodSockets = Number(process.env['FLOOD_SOCKETS'] ?? 4);
const root = new URL('../', import.meta.url);
const mainScript = fileURLToPath(new URL('server/main.js', root));
const flooderScript = fileURLToPath(new URL('bench/flooder.js', root));

interface RunFigures {
  p50: number;
  p99: number;
  max: number;
  steps: number;
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/// The standalone server with its defaults, memory store, open mode.
async function startServerProcess(port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, [mainScript], {
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      STORE: 'memory',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! });
  await new Promise<void>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line.includes('listening on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the server exited ${code}`)));
  });
  lines.removeAllListeners('line');
  child.stdout!.resume();
  return child;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/// The victim: one editor typing on its own document as fast as its acknowledgements come,
/// for `runMs`.
async function victimRun(url: string, doc: string): Promise<RunFigures> {
  const socket: Socket = io(url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc },
    auth: { clientID: `victim-${doc}` },
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('connect_error', reject);
  });
  const ask = <T>(event: string, payload: unknown): Promise<T> =>
    new Promise((resolve) => socket.emit(event, payload, resolve));
  const joined = await ask<{ ok: boolean; version: number }>('join', {});
  let version = joined.version;
  const times: number[] = [];
  const until = performance.now() + runMs;
  while (performance.now() < until) {
    const started = performance.now();
    const answer = await ask<{ ok: boolean; version: number; code?: string }>('steps', {
      version,
      steps: [
        { stepType: 'replace', from: 1, to: 1, slice: { content: [{ type: 'text', text: 'v' }] } },
      ],
    });
    times.push(performance.now() - started);
    if (!answer.ok) throw new Error(`victim refused: ${answer.code}`);
    version = answer.version;
    // The victim's own pace: an editor types at most a few dozen batches a second.
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  socket.close();
  times.sort((a, b) => a - b);
  return {
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    max: times.at(-1)!,
    steps: times.length,
  };
}

/// Starts `floodSockets` flooding `kind` for a little longer than a run; resolves once they
/// flood, with their tally at the end.
async function startFlood(url: string, kind: string): Promise<Promise<Record<string, unknown>>> {
  const child = spawn(
    process.execPath,
    [flooderScript, url, kind, `flood-${kind}`, String(runMs + 500), String(floodSockets)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout! });
  let ready!: () => void;
  const started = new Promise<void>((resolve) => (ready = resolve));
  const tally = new Promise<Record<string, unknown>>((resolve) => {
    lines.on('line', (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      if (message['ready']) ready();
      else resolve(message);
    });
    child.once('exit', () => ready());
  });
  await started;
  return tally;
}

async function main(): Promise<void> {
  const port = await freePort();
  const server = await startServerProcess(port);
  const url = `http://127.0.0.1:${port}`;
  const kinds = Object.keys(floodKinds);
  console.log(
    `floods: node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ` +
      `${rounds} rounds of ${runMs} ms, ${floodSockets} flooding sockets, ${new Date().toISOString()}`,
  );
  const rows: string[] = [];
  let run = 0;
  try {
    for (const kind of kinds) {
      const quiet: RunFigures[] = [];
      const flooded: RunFigures[] = [];
      let lastTally: Record<string, unknown> = {};
      for (let round = 0; round < rounds; round++) {
        // Alternating which comes first, too.
        const order = round % 2 === 0 ? ['quiet', 'flood'] : ['flood', 'quiet'];
        for (const which of order) {
          const doc = `victim-${run++}`;
          if (which === 'quiet') {
            quiet.push(await victimRun(url, doc));
          } else {
            const tally = await startFlood(url, kind);
            flooded.push(await victimRun(url, doc));
            lastTally = await tally;
          }
        }
      }
      const q50 = median(quiet.map((r) => r.p50));
      const f50 = median(flooded.map((r) => r.p50));
      const qMax = median(quiet.map((r) => r.max));
      const fMax = median(flooded.map((r) => r.max));
      rows.push(
        `| ${kind} | ${q50.toFixed(2)} | ${f50.toFixed(2)} | ${(f50 / q50).toFixed(2)}× | ` +
          `${qMax.toFixed(1)} | ${fMax.toFixed(1)} | ${(fMax - qMax).toFixed(1)} | ` +
          `${lastTally['connections']} / ${JSON.stringify(lastTally['closings'])} |`,
      );
      console.error(`${kind}: done (${JSON.stringify(lastTally)})`);
    }
  } finally {
    server.kill('SIGTERM');
  }
  console.log(
    '| flood | p50 quiet (ms) | p50 flooded (ms) | ratio | max quiet (ms) | max flooded (ms) | max added (ms) | flooder connections / closings (last run) |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const row of rows) console.log(row);
}

await main();
