import { monitorEventLoopDelay } from 'node:perf_hooks';

// Preloaded into a server child (`node --import <this file> dist/server/main.js`) by
// `bench/hostile-block.ts`, so that the server's own event loop is measured without a line of
// server code changed. Two independent measures of the longest time the loop was held:
//
// - a drift probe: a 1 ms interval timer noting the longest gap between two of its runs. A gap
//   of G ms means nothing else could run for about G − 1 ms (timers, other sockets' reads);
// - `perf_hooks.monitorEventLoopDelay` at 1 ms resolution, Node's own libuv-timer histogram,
//   as a cross-check of the first.
//
// The parent talks to it over the IPC channel: `{probe: 'reset', id}` clears both and is
// answered `{probe: 'reset', id}`; `{probe: 'read', id}` is answered with what was seen since.

/// What `read` answers.
export interface ProbeReading {
  probe: 'read';
  id: number;
  /// Longest gap between two drift-probe runs, minus the 1 ms interval.
  longestBlockMs: number;
  /// CPU time (user + system, all of the process's threads) spent during that gap. Near the
  /// gap or above it: the loop was busy. Well below it: the process was waiting, most likely
  /// for a core the machine's other processes held.
  longestBlockCpuMs: number;
  /// `monitorEventLoopDelay`'s largest recorded delay.
  histogramMaxMs: number;
  /// Drift-probe gaps over 5 ms since the reset: how many, and their sum.
  blocksOver5Ms: number;
  blockedMsOver5Ms: number;
}

const intervalMs = 1;
const histogram = monitorEventLoopDelay({ resolution: intervalMs });
histogram.enable();

let last = performance.now();
let lastCpu = process.cpuUsage();
let longestGapMs = 0;
let longestGapCpuMs = 0;
let blocksOver5Ms = 0;
let blockedMsOver5Ms = 0;

// unref: the probe must never keep a server that is shutting down alive.
setInterval(() => {
  const now = performance.now();
  const cpu = process.cpuUsage();
  const gap = now - last;
  if (gap > longestGapMs) {
    longestGapMs = gap;
    longestGapCpuMs = (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000;
  }
  last = now;
  lastCpu = cpu;
  if (gap - intervalMs > 5) {
    blocksOver5Ms++;
    blockedMsOver5Ms += gap - intervalMs;
  }
}, intervalMs).unref();

process.on('message', (message: { probe?: string; id?: number }) => {
  if (message?.probe === 'reset') {
    longestGapMs = 0;
    longestGapCpuMs = 0;
    blocksOver5Ms = 0;
    blockedMsOver5Ms = 0;
    histogram.reset();
    last = performance.now();
    lastCpu = process.cpuUsage();
    process.send?.({ probe: 'reset', id: message.id });
  } else if (message?.probe === 'read') {
    const reading: ProbeReading = {
      probe: 'read',
      id: message.id ?? 0,
      longestBlockMs: Math.max(0, longestGapMs - intervalMs),
      longestBlockCpuMs: longestGapCpuMs,
      histogramMaxMs: histogram.max / 1e6,
      blocksOver5Ms,
      blockedMsOver5Ms,
    };
    process.send?.(reading);
  }
});
// The channel alone must not keep the process alive either.
process.channel?.unref();
