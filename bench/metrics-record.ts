// Per-message cost of metrics recording, in nanoseconds per `steps` message:
//   npm run bench:metrics            (builds, then runs dist/bench/metrics-record.js)
// Cases run interleaved in rounds so machine noise hits them alike; the report quotes the
// median of the rounds (and the spread) per case, never one lucky run.
import { createHistogram } from 'node:perf_hooks';
import { Histogram, Registry } from 'prom-client';
import { MetricsRecorder } from '../metrics/index.js';

const callsPerRound = 1_000_000;
const rounds = 9;
const messages = 4096; // power of two: the index wraps with a mask

// Synthetic messages: 100 documents, 1% stale, latencies spread over 50 µs–5 ms.
const documentIds = Array.from({ length: 100 }, (_, i) => `doc-${i}`);
const docOf: string[] = [];
const outcomeOf: string[] = [];
const received = new Float64Array(messages);
const applied = new Float64Array(messages);
const persisted = new Float64Array(messages);
const sent = new Float64Array(messages);
let seed = 42;
function random(): number {
  // Deterministic LCG so every run measures the same inputs.
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
}
for (let i = 0; i < messages; i++) {
  docOf.push(documentIds[Math.floor(random() * documentIds.length)]);
  outcomeOf.push(random() < 0.01 ? 'stale' : 'accepted');
  received[i] = 1000 + i;
  applied[i] = received[i] + 0.02 + random() * 0.2;
  persisted[i] = applied[i] + 0.02 + random() * 3;
  sent[i] = persisted[i] + 0.01 + random() * 1.5;
}

const enabled = new MetricsRecorder({ enabled: true }, { now: () => 5_000 });
// documentHistogramsMax 0: no per-document latency histogram (top documents get p99Ms null).
const noDocumentLatency = new MetricsRecorder({ documentHistogramsMax: 0 }, { now: () => 5_000 });
const disabled = new MetricsRecorder({ enabled: false }, { now: () => 5_000 });
const registry = new Registry();
const promHistogram = new Histogram({
  name: 'bench_latency_seconds',
  help: 'bench',
  buckets: [...enabled.config.latencyBucketsSeconds],
  registers: [registry],
});
const promLabelled = new Histogram({
  name: 'bench_latency_labelled_seconds',
  help: 'bench',
  labelNames: ['outcome'],
  buckets: [...enabled.config.latencyBucketsSeconds],
  registers: [registry],
});
const hdr = createHistogram({ lowest: 1, highest: 60_000_000, figures: 3 });
let sink = 0;

// One function per case, each with its own loop, so V8 optimises each call site
// monomorphically as the server's single call site would be.
const cases: Record<string, (n: number) => void> = {
  'loop only (baseline)': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      sink += sent[m] - received[m] + docOf[m].length + outcomeOf[m].length;
    }
  },
  'recorder.record, METRICS=off': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      disabled.record(docOf[m], outcomeOf[m], 3, received[m], applied[m], persisted[m], sent[m]);
    }
  },
  'recorder.record, enabled': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      enabled.record(docOf[m], outcomeOf[m], 3, received[m], applied[m], persisted[m], sent[m]);
    }
  },
  'recorder.record, no per-doc histogram': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      noDocumentLatency.record(
        docOf[m],
        outcomeOf[m],
        3,
        received[m],
        applied[m],
        persisted[m],
        sent[m],
      );
    }
  },
  'one perf_hooks histogram.record (µs)': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      hdr.record(Math.round((sent[m] - received[m]) * 1000));
    }
  },
  'prom-client observe, no labels': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      promHistogram.observe((sent[m] - received[m]) / 1000);
    }
  },
  'prom-client observe, outcome label': (n) => {
    for (let i = 0; i < n; i++) {
      const m = i & (messages - 1);
      promLabelled.observe({ outcome: outcomeOf[m] }, (sent[m] - received[m]) / 1000);
    }
  },
};

function nsPerCall(run: (n: number) => void): number {
  const start = process.hrtime.bigint();
  run(callsPerRound);
  return Number(process.hrtime.bigint() - start) / callsPerRound;
}

const names = Object.keys(cases);
for (const name of names) nsPerCall(cases[name]); // warm-up: let V8 optimise every case
const results = new Map<string, number[]>(names.map((name) => [name, []]));
for (let round = 0; round < rounds; round++) {
  for (const name of names) results.get(name)!.push(nsPerCall(cases[name]));
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

console.log(
  `node ${process.version}, ${rounds} rounds × ${callsPerRound} calls, ns per call (median [min–max])`,
);
for (const name of names) {
  const values = results.get(name)!;
  const fmt = (v: number): string => v.toFixed(1);
  console.log(
    `${name.padEnd(40)} ${fmt(median(values)).padStart(7)}  [${fmt(Math.min(...values))}–${fmt(Math.max(...values))}]`,
  );
}
// Keep the work observable so no case is optimised away.
if (sink === -1) console.log(sink, enabled.totals.batchesReceived);
