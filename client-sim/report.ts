import type { LevelResult, SwarmProgress, SwarmResult } from './swarm.js';

/// The summary of a run as a markdown table, one row per level. The first five columns are the
/// server's view, in the shape BENCHMARKS.md has always used (steady RPS, the median over
/// steady windows of the server's p90 and p99); the rest are the simulator's own: edits
/// confirmed per second, edit-to-confirm p90/p99 over the merged steady windows, the share
/// of `steps` messages refused, and whether every document converged; last, the edits offered
/// and made per second, which differ when the simulator could not keep its own schedule
/// (`generator-limited`); then the server's processing p90/p99 and hold p99 (the latency split
/// in the time spent on a message and the time it waited for its flush, medians over steady
/// windows). Columns are only ever added at the end: other tools read the rest.
export function summaryTable(result: SwarmResult): string {
  const rows = [
    '| Editors | Steady RPS | p90 (ms) | p99 (ms) | State | Docs | RTT (ms) | Confirmed edits/s | Client p90 (ms) | Client p99 (ms) | Refused | Converged | Offered edits/s | Made edits/s | Processing p90 (ms) | Processing p99 (ms) | Hold p99 (ms) |',
    '| ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const level of result.levels) rows.push(summaryRow(level));
  return rows.join('\n');
}

function summaryRow(level: LevelResult): string {
  const steady = level.steady;
  const server = steady.server;
  const cells = [
    String(level.editors),
    fixed(server?.acceptedPerSec, 1),
    fixed(server?.p90Ms, 2),
    fixed(server?.p99Ms, 2),
    level.state,
    String(level.documents),
    String(level.rttMs),
    steady.windows === 0 ? '–' : fixed(steady.confirmedPerSec, 1),
    fixed(steady.latency?.p90Ms, 1),
    fixed(steady.latency?.p99Ms, 1),
    steady.windows === 0 ? '–' : percent(steady.refusalShare),
    level.convergence.converged
      ? `yes (${level.convergence.checked})`
      : level.convergence.unchecked
        ? 'unchecked'
        : `NO: ${level.convergence.failures.length}`,
    fixed(steady.offeredPerSec, 1),
    steady.windows === 0 ? '–' : fixed(steady.editsPerSec, 1),
    fixed(server?.processingP90Ms, 2),
    fixed(server?.processingP99Ms, 2),
    fixed(server?.holdP99Ms, 2),
  ];
  return `| ${cells.join(' | ')} |`;
}

/// One line per window of a level: the simulator's and the server's figures side by side.
export function windowTable(level: LevelResult): string {
  const rows = [
    '| Window | Steady | Editors (sim/server) | Edits/s | Confirmed/s | Client p50/p90/p99/max (ms) | Refused | Server RPS | Server p50/p90/p99/max (ms) | Server processing/hold p99 (ms) |',
    '| :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const window of level.windows) {
    const latency = window.latency;
    const server = window.server;
    rows.push(
      `| ${new Date(window.startMs).toISOString().slice(11, 19)} | ${
        window.steady ? 'yes' : window.partial ? 'partial' : 'warm-up'
      } | ${window.connected}/${server?.editors ?? '–'} | ${fixed(window.editsPerSec, 1)} | ${fixed(
        window.confirmedPerSec,
        1,
      )} | ${
        latency
          ? [latency.p50Ms, latency.p90Ms, latency.p99Ms, latency.maxMs]
              .map((v) => v.toFixed(1))
              .join(' / ')
          : '–'
      } | ${percent(window.refusalShare)} | ${fixed(server?.acceptedPerSec, 1)} | ${
        server
          ? [server.p50Ms, server.p90Ms, server.p99Ms, server.maxMs]
              .map((v) => fixed(v, 2))
              .join(' / ')
          : '–'
      } | ${server ? `${fixed(server.processingP99Ms, 2)} / ${fixed(server.holdP99Ms, 2)}` : '–'} |`,
    );
  }
  return rows.join('\n');
}

/// What ran: editors by kind, workers, and the machine.
export function runDescription(result: SwarmResult): string {
  const lines = result.levels.map(
    (level) =>
      `- ${level.editors} editors (${level.lightEditors} light, ${level.fullEditors} full) on ${level.documents} document(s), ${level.observers} observers, ${level.workers === 0 ? 'in the main thread' : `${level.workers} worker threads`}; ${level.totals.edits} edits, ${level.totals.confirmed} confirmed, ${level.totals.dropped} dropped, ${level.totals.reconnects} reconnects`,
  );
  lines.push(
    `- Machine: ${result.machine.cpus} × ${result.machine.cpuModel}, Node ${result.machine.node}, ${result.machine.os}`,
  );
  if (!result.serverMetrics) lines.push('- Server metrics unavailable (no /metrics/windows)');
  return lines.join('\n');
}

/// A one-line progress bar for a terminal.
export function progressLine(progress: SwarmProgress): string {
  const width = 20;
  const share = Math.min(1, progress.elapsedSec / Math.max(1, progress.durationSec));
  const filled = Math.round(share * width);
  const bar = '#'.repeat(filled) + '-'.repeat(width - filled);
  const rate = progress.editsPerSec === null ? '–' : progress.editsPerSec.toFixed(0);
  const p99 = progress.p99Ms === null ? '–' : progress.p99Ms.toFixed(1);
  return `level ${progress.level}/${progress.levels} (${progress.editors} editors) [${bar}] ${progress.elapsedSec.toFixed(0)}/${progress.durationSec}s ${progress.phase}  edits/s ${rate}  p99 ${p99} ms`;
}

function fixed(value: number | null | undefined, digits: number): string {
  return value === null || value === undefined ? '–' : value.toFixed(digits);
}

function percent(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}
