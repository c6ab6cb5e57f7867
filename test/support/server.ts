import { pino } from 'pino';
import { MetricsRecorder } from '../../metrics/index.js';
import { createScriptorium, type Scriptorium } from '../../server/app/app.js';
import { roomsOf } from '../../server/collab.js';
import type { Rooms } from '../../server/rooms/registry.js';
import { loadConfig, type Config } from '../../server/config.js';
import { MemoryStore } from '../../server/stores/memory_store.js';
import type { Store } from '../../server/stores/store.js';

/// A real server on 127.0.0.1 and a free port, for integration tests.
export interface TestServer {
  /// The server, with its document registry (`roomsOf`) for tests that read a room's state.
  server: Scriptorium & { readonly rooms: Rooms };
  store: Store;
  url: string;
  port: number;
  close(): Promise<void>;
}

/// Starts a server with `store` (a fresh MemoryStore by default), config `overrides` and,
/// optionally, a metrics recorder of the test's own (with a fake clock).
export async function startServer(
  overrides: Partial<Config> = {},
  store: Store = new MemoryStore(),
  metrics?: MetricsRecorder,
): Promise<TestServer> {
  // A test of behaviour must not turn on how fast a loaded machine applies a batch: the
  // apply-time backstop (`maxApplyMs`) has tests of its own, which set it.
  const config = loadConfig({ host: '127.0.0.1', port: 0, maxApplyMs: 1_000, ...overrides });
  const log = pino({ level: process.env['TEST_LOG_LEVEL'] ?? 'silent' });
  const app = createScriptorium(config, metrics ? { store, log, metrics } : { store, log });
  const server = Object.assign(app, { rooms: roomsOf(app.collab) });
  const port = await server.listen();
  return {
    server,
    store,
    port,
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      await server.close();
    },
  };
}

/// A test server whose metrics run on fake clocks: windows close when `advance` says, not
/// every 10 s. `advance(ms)` moves both the wall clock and the monotonic one (time passing)
/// and closes the windows that ended; `stepWallClock(ms)` moves only the wall clock, as NTP
/// correcting it would. `overrides` as `startServer`'s.
export async function startServerWithFakeClock(
  startMs: number,
  overrides: Partial<Config> = {},
): Promise<
  TestServer & {
    metrics: MetricsRecorder;
    advance(ms: number): number;
    stepWallClock(ms: number): void;
  }
> {
  const clock = { wall: startMs, monotonic: 0 };
  let server: TestServer | null = null;
  const metrics = new MetricsRecorder(
    { enabled: true },
    {
      now: () => clock.wall,
      monotonicNow: () => clock.monotonic,
      // The hooks the server gives its own recorder (server/app/app.ts), so that what the
      // tests read of editors and documents is what production reports.
      editors: () => server?.server.collab.editors ?? 0,
      documents: () => server?.server.collab.stats().documents ?? 0,
    },
  );
  server = await startServer(overrides, undefined, metrics);
  return {
    ...server,
    metrics,
    advance(ms: number) {
      clock.wall += ms;
      clock.monotonic += ms;
      return metrics.tick();
    },
    stepWallClock(ms: number) {
      clock.wall += ms;
    },
  };
}
