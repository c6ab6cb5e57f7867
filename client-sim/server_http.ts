import type { DocJSON } from '../schema/protocol.js';

/// Thrown when the server cannot be used: nothing listens at the URL, it is not a Scriptorium
/// server, or it is shutting down. The message says which and what to do.
export class ServerUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServerUnavailableError';
  }
}

/// One of the server's metrics windows, read defensively: the fields the simulator shows, each
/// null when the server does not report it. `raw` keeps everything the server sent.
export interface ServerWindow {
  startMs: number;
  editors: number | null;
  documents: number | null;
  receivedPerSec: number | null;
  acceptedPerSec: number | null;
  stepsPerSec: number | null;
  rejections: Record<string, number>;
  p50Ms: number | null;
  p90Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  /// The latency less the flush hold, and the hold (`processingP90Ms`…, `holdP99Ms`): null
  /// from a server that does not report them apart.
  processingP90Ms: number | null;
  processingP99Ms: number | null;
  holdP99Ms: number | null;
  raw: Record<string, unknown>;
}

/// Checks that a Scriptorium server answers `GET /healthz` at `url` within `timeoutMs`.
/// Throws `ServerUnavailableError` with a message that names the URL otherwise.
export async function probeServer(url: string, timeoutMs = 3000): Promise<void> {
  const target = new URL('/healthz', url).toString();
  let response: Response;
  try {
    response = await fetch(target, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    const cause =
      (err as { cause?: { code?: string; message?: string } }).cause?.code ??
      (err as { cause?: { message?: string } }).cause?.message;
    const why =
      (err as Error).name === 'TimeoutError'
        ? `no answer within ${timeoutMs} ms`
        : cause === 'ECONNREFUSED'
          ? 'connection refused'
          : (cause ?? (err as Error).message);
    throw new ServerUnavailableError(
      `No Scriptorium server at ${url} (${why}). Start one (npm start) or pass --url.`,
    );
  }
  const body = (await response.json().catch(() => null)) as { ok?: unknown } | null;
  if (!response.ok || body?.ok !== true) {
    throw new ServerUnavailableError(
      `${target} answered HTTP ${response.status}${
        response.status === 503 ? ' (shutting down?)' : ''
      }: is ${url} a Scriptorium server?`,
    );
  }
}

/// The server's copy of a document: `GET /docs/:id`. Tries three times, since an idle
/// keep-alive connection the server is closing just then fails a request that would succeed on
/// a fresh one; throws when it still cannot be read.
export async function fetchDocument(
  url: string,
  docId: string,
): Promise<{ version: number; doc: DocJSON }> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetchDocumentOnce(url, docId);
    } catch (err) {
      if (attempt >= 3) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

async function fetchDocumentOnce(
  url: string,
  docId: string,
): Promise<{ version: number; doc: DocJSON }> {
  let response: Response;
  try {
    response = await fetch(new URL(`/docs/${encodeURIComponent(docId)}`, url), {
      signal: AbortSignal.timeout(10_000),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(
      `GET /docs/${docId} failed: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
    );
  }
  if (!response.ok) {
    throw new Error(`GET /docs/${docId} answered HTTP ${response.status}`);
  }
  const body = (await response.json()) as { version?: unknown; doc?: unknown };
  if (typeof body.version !== 'number' || typeof body.doc !== 'object' || body.doc === null) {
    throw new Error(`GET /docs/${docId} answered without a version and a document`);
  }
  return { version: body.version, doc: body.doc as DocJSON };
}

/// The server's last `last` metrics windows (`GET /metrics/windows?last=N`), oldest first, or
/// null when the server does not offer them (404, another shape, an error): metrics are a
/// view next to the simulator's own, never a reason to fail a run.
export async function fetchServerWindows(
  url: string,
  last: number,
): Promise<ServerWindow[] | null> {
  let body: unknown;
  try {
    const response = await fetch(new URL(`/metrics/windows?last=${last}`, url), {
      signal: AbortSignal.timeout(5000),
    });
    if (!response.ok) return null;
    body = await response.json();
  } catch {
    return null;
  }
  const list = Array.isArray(body)
    ? body
    : Array.isArray((body as { windows?: unknown } | null)?.windows)
      ? (body as { windows: unknown[] }).windows
      : null;
  if (!list) return null;
  const windows: ServerWindow[] = [];
  for (const entry of list) {
    if (typeof entry !== 'object' || entry === null) continue;
    const window = readWindow(entry as Record<string, unknown>);
    if (window) windows.push(window);
  }
  return windows;
}

/// Reads one window by the names the metrics recorder uses (`startMs`, `batchesAcceptedPerSec`,
/// `latencyP99Ms`…) and a few plainer ones (`start`, `rps`, `p99`, `latency.p99`), so that
/// the simulator can read a server whose windows use either.
function readWindow(raw: Record<string, unknown>): ServerWindow | null {
  const startMs = time(pick(raw, ['startMs', 'start', 'from', 'windowStart']));
  if (startMs === null) return null;
  const latency = (typeof raw['latency'] === 'object' && raw['latency']) as Record<
    string,
    unknown
  > | null;
  const percentile = (name: string) =>
    num(
      pick(raw, [`latency${name.toUpperCase()}Ms`, `${name}Ms`, name]) ??
        (latency ? pick(latency, [`${name}Ms`, name]) : undefined),
    );
  const rejections: Record<string, number> = {};
  const rawRejections = raw['rejections'] ?? raw['rejected'];
  if (typeof rawRejections === 'object' && rawRejections !== null) {
    for (const [code, count] of Object.entries(rawRejections)) {
      if (typeof count === 'number') rejections[code] = count;
    }
  }
  return {
    startMs,
    editors: num(pick(raw, ['editors', 'sockets', 'connections'])),
    documents: num(pick(raw, ['documents', 'docs'])),
    receivedPerSec: num(pick(raw, ['batchesReceivedPerSec', 'receivedPerSec', 'received'])),
    acceptedPerSec: num(pick(raw, ['batchesAcceptedPerSec', 'acceptedPerSec', 'rps', 'accepted'])),
    stepsPerSec: num(pick(raw, ['stepsAcceptedPerSec', 'stepsPerSecond', 'stepsPerSec'])),
    rejections,
    p50Ms: percentile('p50'),
    p90Ms: percentile('p90'),
    p99Ms: percentile('p99'),
    maxMs: percentile('max'),
    processingP90Ms: num(raw['processingP90Ms']),
    processingP99Ms: num(raw['processingP99Ms']),
    holdP99Ms: num(raw['holdP99Ms']),
    raw,
  };
}

function pick(record: Record<string, unknown>, names: readonly string[]): unknown {
  for (const name of names)
    if (record[name] !== undefined && record[name] !== null) return record[name];
  return undefined;
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/// A window start as ms since the epoch: a number (seconds when it is too small to be ms) or a
/// date string.
function time(value: unknown): number | null {
  if (typeof value === 'number' && Number.isFinite(value))
    return value < 1e11 ? value * 1000 : value;
  if (typeof value === 'string') {
    const parsed = Date.parse(value);
    return Number.isNaN(parsed) ? null : parsed;
  }
  return null;
}
