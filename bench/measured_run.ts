import type { SwarmOptions } from '../client-sim/options.js';
import { fetchServerWindows } from '../client-sim/server_http.js';
import { cpuProbeArgs, ProbeCpuSamples, startServerProcess } from '../client-sim/server_process.js';
import { runSwarm } from '../client-sim/swarm.js';

/// The figures of one swarm level against a fresh server child, over the level's steady
/// windows (after the warm-up). Server figures are null when the server keeps no metrics
/// windows (METRICS=off).
export interface MeasuredRun {
  label: string;
  confirmedPerSec: number;
  clientP50Ms: number | null;
  clientP99Ms: number | null;
  /// `steps` messages accepted: sent minus refused, counted by the simulator so that it is
  /// the same count with and without server metrics.
  acceptedBatches: number;
  /// Edits confirmed to the people who made them (a batch carries one or more edits).
  confirmedEdits: number;
  /// Steps in the accepted batches (steps sent, scaled by the share of batches accepted).
  acceptedSteps: number;
  /// `steps` broadcasts the simulated sockets received: one server frame each.
  broadcasts: number;
  refusalShare: number;
  /// The server child's user + system CPU over the steady windows, per 1,000 accepted batches,
  /// as the child reads it of itself.
  cpuMsPer1000: number | null;
  /// The server child's CPU over the steady windows, in all.
  cpuMs: number | null;
  /// The length of the steady windows together.
  steadySec: number;
  /// Medians over the steady windows of the server's own per-window percentiles.
  serverP50Ms: number | null;
  serverP99Ms: number | null;
  persistP99Ms: number | null;
  state: string;
  converged: boolean;
}

/// Starts `node dist/server/main.js` with `env`, runs one level of `editors` with `options`
/// against it while sampling the child's CPU, reads its metrics windows, stops it and returns
/// the steady figures. Throws what `startServerProcess` and `runSwarm` throw.
export async function measuredRun(
  label: string,
  env: Record<string, string>,
  options: Partial<SwarmOptions> & { levels: [number] },
): Promise<MeasuredRun> {
  // The CPU figure is read by the server process itself (`client-sim/cpu_probe.ts`).
  const server = await startServerProcess(env, { nodeArgs: cpuProbeArgs, ipc: true });
  const sampler = new ProbeCpuSamples(server.child);
  let result, windows;
  try {
    result = await runSwarm({ ...options, url: server.url });
    windows = await fetchServerWindows(server.url, 60);
  } finally {
    await sampler.stop();
    await server.stop();
  }
  const level = result.levels[0]!;
  const steady = level.windows.filter((window) => window.steady);
  let accepted = 0;
  let confirmedEdits = 0;
  let stepsSent = 0;
  let sends = 0;
  let broadcasts = 0;
  for (const window of steady) {
    confirmedEdits += window.confirmed;
    broadcasts += window.broadcasts;
    stepsSent += window.stepsSent;
    sends += window.sends;
    let refused = 0;
    for (const count of Object.values(window.refusals)) refused += count;
    accepted += window.sends - refused;
  }
  const cpuMs =
    steady.length === 0
      ? null
      : sampler.cpuMsBetween(steady[0]!.startMs, steady[steady.length - 1]!.endMs);
  // The simulator aligns its windows to the server's 10-second boundaries; allow a second of
  // clock rounding when matching them.
  const serverSteady = (windows ?? []).filter((w) =>
    steady.some((s) => Math.abs(s.startMs - w.startMs) < 1000),
  );
  const field = (name: string) =>
    median(
      serverSteady
        .map((w) => w.raw[name])
        .filter((v): v is number => typeof v === 'number' && Number.isFinite(v)),
    );
  return {
    label,
    confirmedPerSec: level.steady.confirmedPerSec,
    clientP50Ms: level.steady.latency?.p50Ms ?? null,
    clientP99Ms: level.steady.latency?.p99Ms ?? null,
    acceptedBatches: accepted,
    confirmedEdits,
    acceptedSteps: sends === 0 ? 0 : (stepsSent * accepted) / sends,
    broadcasts,
    cpuMs,
    steadySec: steady.reduce((sum, window) => sum + (window.endMs - window.startMs), 0) / 1000,
    refusalShare: level.steady.refusalShare,
    cpuMsPer1000: cpuMs === null || accepted === 0 ? null : (cpuMs / accepted) * 1000,
    serverP50Ms: field('latencyP50Ms'),
    serverP99Ms: field('latencyP99Ms'),
    persistP99Ms: field('persistP99Ms'),
    state: level.state,
    converged: level.convergence.converged,
  };
}

/// The median of the numbers given, null for none.
export function median(values: readonly (number | null)[]): number | null {
  const list = values.filter((v): v is number => v !== null).sort((a, b) => a - b);
  if (list.length === 0) return null;
  const mid = list.length >> 1;
  return list.length % 2 ? list[mid]! : (list[mid - 1]! + list[mid]!) / 2;
}

/// A number with `digits` decimals, or an en dash for null.
export function fixed(value: number | null, digits: number): string {
  return value === null ? '–' : value.toFixed(digits);
}

/// One line per run, for the log: what ran and its figures.
export function runLine(run: MeasuredRun): string {
  return `${run.label}: ${fixed(run.confirmedPerSec, 1)} confirmed/s, client p50/p99 ${fixed(
    run.clientP50Ms,
    1,
  )}/${fixed(run.clientP99Ms, 1)} ms, server p50/p99 ${fixed(run.serverP50Ms, 2)}/${fixed(
    run.serverP99Ms,
    2,
  )} ms, persist p99 ${fixed(run.persistP99Ms, 2)} ms, CPU ${fixed(
    run.cpuMsPer1000,
    0,
  )} ms/1000 batches, refused ${(run.refusalShare * 100).toFixed(1)}%, ${run.state}, ${
    run.converged ? 'converged' : 'DIVERGED'
  }`;
}
