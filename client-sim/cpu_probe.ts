// Preloaded into a server child (`node --import <this file> <entry>`, with an IPC channel) by
// the benchmarks that report server CPU per edit, so that the figure is read by the server
// process itself (`process.cpuUsage()`, microseconds, every thread of the process) and the
// same way for every server compared: Scriptorium's and a peer's alike, without a line of
// either changed.
//
// Every `everyMs`, and at once when the parent sends `{probe: 'cpu'}`, it sends
// `{probe: 'cpu', atMs, cpuUs}` to the parent: the wall clock (ms since the epoch, the same
// clock the simulator's windows use) and the user + system CPU the process has used since it
// started.

/// What the probe sends.
export interface CpuReading {
  probe: 'cpu';
  atMs: number;
  cpuUs: number;
}

const everyMs = 250;

function send(): void {
  if (!process.send || !process.connected) return;
  const usage = process.cpuUsage();
  const reading: CpuReading = { probe: 'cpu', atMs: Date.now(), cpuUs: usage.user + usage.system };
  process.send(reading);
}

// unref: the probe must never keep a server that is shutting down alive. The channel itself
// is unref'd for the same reason (a child with IPC otherwise waits for the parent).
setInterval(send, everyMs).unref();
process.on('message', (message: { probe?: string } | null) => {
  if (message?.probe === 'cpu') send();
});
process.channel?.unref();
send();
