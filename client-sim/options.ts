import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { schemaModuleUrl } from './schema_module.js';

/// Everything a swarm run can be told. Rates are edits per second per editor; levels are total
/// editors (light and full) per run, one run per level.
export interface SwarmOptions {
  url: string;
  /// Total editors of each level, run one after another.
  levels: number[];
  /// Documents the editors of a level are spread over.
  docs: number;
  /// Mean edit rate per editor; each editor draws its own between 0.8 and 1.2 times it.
  ratePerSec: number;
  /// Editing time per level.
  durationSec: number;
  /// Complete windows at the start of each level left out of the steady figures.
  warmupWindows: number;
  /// Added round-trip time, half each way, with jitter.
  rttMs: number;
  /// Read-only sockets per level, spread over the documents.
  observers: number;
  seed: number;
  /// Full editors (real `CollabClient`s) per document; the rest are light editors.
  fullPerDoc: number;
  /// Worker threads; 'auto' runs in the main thread up to 50 editors, else two or more.
  workers: number | 'auto';
  /// Window length. The server's windows are 10 s; shorter windows are for quick tests.
  windowMs: number;
  /// Start editing at a window boundary so that every window of a level is complete.
  alignStart: boolean;
  /// A file URL of an ES module exporting `schema`, the server's schema (`--schema`); null
  /// for the built-in one.
  schemaModule: string | null;
}

/// The defaults: what `npm run sim` runs with when nothing is given.
export const defaultOptions: Readonly<SwarmOptions> = Object.freeze({
  url: 'http://127.0.0.1:4000',
  schemaModule: null,
  levels: [10],
  docs: 1,
  ratePerSec: 5,
  durationSec: 60,
  warmupWindows: 1,
  rttMs: 0,
  observers: 0,
  seed: 1,
  fullPerDoc: 2,
  workers: 'auto',
  windowMs: 10_000,
  alignStart: true,
});

/// What the command line adds to the swarm options: where to write results.
export interface CliOptions extends SwarmOptions {
  jsonFile: string | null;
  svgFile: string | null;
  help: boolean;
}

/// Thrown for an option that cannot be accepted; the message names the option and says why.
export class OptionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OptionError';
  }
}

/// The `--help` text.
export const usage = `Usage: npm run sim -- [options]

Simulates people editing documents on a Scriptorium server and measures, per 10-second
window, edits submitted and confirmed, edit-to-confirm latency and refusals, next to the
server's own metrics windows. Exits non-zero when the server is absent or any document diverges.

  --url URL          server base URL (default ${defaultOptions.url})
  --editors N        editors in total, light and full (default ${defaultOptions.levels[0]})
  --ramp A,B,...     one run per level of total editors, e.g. 10,15,20,25,30
  --docs D           documents the editors are spread over (default ${defaultOptions.docs})
  --rate R           mean edits per second per editor, each drawn from 0.8R–1.2R (default ${defaultOptions.ratePerSec})
  --duration S       editing seconds per level (default ${defaultOptions.durationSec})
  --warmup W         windows at the start of each level left out of the summary (default ${defaultOptions.warmupWindows})
  --rtt MS           added round-trip time, half each way with jitter (default ${defaultOptions.rttMs})
  --observers N      read-only sockets that only receive (default ${defaultOptions.observers})
  --full N           full editors (real CollabClients) per document (default ${defaultOptions.fullPerDoc})
  --workers W        worker threads, or auto (default auto: none up to 50 editors)
  --seed N           seed of every random choice (default ${defaultOptions.seed})
  --schema MODULE    an ES module exporting \`schema\`, the server's ProseMirror schema
                     (default: the built-in one); edits its node types lack become typing
  --json FILE        write the full results as JSON
  --svg FILE         write a chart of latency and throughput against editors
  --help             show this text
`;

const integerLimits = {
  editors: [1, 100_000],
  docs: [1, 10_000],
  duration: [1, 86_400],
  warmup: [0, 1_000],
  rtt: [0, 60_000],
  observers: [0, 100_000],
  full: [0, 1_000],
  seed: [0, 4_294_967_295],
} as const;

/// Parses command-line arguments (without `node` and the script) into options. Throws
/// `OptionError` for an unknown option, a value that is not a number, or one out of range.
export function parseSimArgs(argv: readonly string[]): CliOptions {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        url: { type: 'string' },
        editors: { type: 'string' },
        ramp: { type: 'string' },
        docs: { type: 'string' },
        rate: { type: 'string' },
        duration: { type: 'string' },
        warmup: { type: 'string' },
        rtt: { type: 'string' },
        observers: { type: 'string' },
        full: { type: 'string' },
        workers: { type: 'string' },
        seed: { type: 'string' },
        schema: { type: 'string' },
        json: { type: 'string' },
        svg: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    // parseArgs' own messages name the option; keep them, drop the error code prefix.
    throw new OptionError((err as Error).message.replace(/^TypeError \[[A-Z_]+\]: /, ''));
  }
  const values = parsed.values;
  const options: CliOptions = {
    ...defaultOptions,
    levels: [...defaultOptions.levels],
    jsonFile: values.json ?? null,
    svgFile: values.svg ?? null,
    help: values.help === true,
  };
  if (values.url !== undefined) options.url = values.url;
  if (values.editors !== undefined && values.ramp !== undefined) {
    throw new OptionError('Give either --editors or --ramp, not both');
  }
  if (values.editors !== undefined) options.levels = [integer('editors', values.editors)];
  if (values.ramp !== undefined) {
    options.levels = values.ramp.split(',').map((part) => integer('editors', part.trim(), 'ramp'));
  }
  if (values.docs !== undefined) options.docs = integer('docs', values.docs);
  if (values.rate !== undefined) options.ratePerSec = decimal('rate', values.rate, 0.01, 1000);
  if (values.duration !== undefined) options.durationSec = integer('duration', values.duration);
  if (values.warmup !== undefined) options.warmupWindows = integer('warmup', values.warmup);
  if (values.rtt !== undefined) options.rttMs = integer('rtt', values.rtt);
  if (values.observers !== undefined) options.observers = integer('observers', values.observers);
  if (values.full !== undefined) options.fullPerDoc = integer('full', values.full);
  if (values.seed !== undefined) options.seed = integer('seed', values.seed);
  if (values.schema !== undefined) options.schemaModule = schemaModuleUrl(values.schema);
  if (values.workers !== undefined) {
    options.workers =
      values.workers === 'auto' ? 'auto' : integerIn('workers', values.workers, 0, 64);
  }
  return { ...options, ...validateOptions(options) };
}

/// Fills in defaults and checks the values that parsing cannot: every level has at least one
/// editor per document, the URL is http(s). Returns a complete, frozen copy; throws
/// `OptionError`. `runSwarm` calls it, so programmatic callers get the same checks.
export function validateOptions(options: Partial<SwarmOptions>): Readonly<SwarmOptions> {
  const resolved: SwarmOptions = { ...defaultOptions, ...options };
  let url: URL;
  try {
    url = new URL(resolved.url);
  } catch {
    throw new OptionError(
      `--url must be a URL such as http://127.0.0.1:4000, got "${resolved.url}"`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new OptionError(`--url must be http:// or https://, got "${resolved.url}"`);
  }
  if (resolved.levels.length === 0 || resolved.levels.length > 50) {
    throw new OptionError('--ramp takes 1 to 50 levels');
  }
  for (const level of resolved.levels) {
    checkInteger('editors', level, ...integerLimits.editors);
    if (level < resolved.docs) {
      throw new OptionError(
        `Every document needs an editor: ${level} editors cannot cover --docs ${resolved.docs}`,
      );
    }
  }
  checkInteger('docs', resolved.docs, ...integerLimits.docs);
  checkInteger('duration', resolved.durationSec, ...integerLimits.duration);
  checkInteger('warmup', resolved.warmupWindows, ...integerLimits.warmup);
  checkInteger('rtt', resolved.rttMs, ...integerLimits.rtt);
  checkInteger('observers', resolved.observers, ...integerLimits.observers);
  checkInteger('full', resolved.fullPerDoc, ...integerLimits.full);
  checkInteger('seed', resolved.seed, ...integerLimits.seed);
  if (!(resolved.ratePerSec > 0 && resolved.ratePerSec <= 1000)) {
    throw new OptionError(
      `--rate must be more than 0 and at most 1000, got ${resolved.ratePerSec}`,
    );
  }
  if (resolved.workers !== 'auto') checkInteger('workers', resolved.workers, 0, 64);
  checkInteger('windowMs', resolved.windowMs, 100, 600_000);
  return Object.freeze({ ...resolved, levels: [...resolved.levels] });
}

/// How many worker threads a level of `editors` sockets gets: none up to 50 (a thread handles
/// that many easily and workers only add start-up time), else one per 150 sockets, at least
/// two and at most one per CPU.
export function workersFor(editors: number, workers: number | 'auto'): number {
  if (workers !== 'auto') return workers;
  if (editors <= 50) return 0;
  return Math.min(Math.max(2, Math.ceil(editors / 150)), Math.max(2, availableParallelism()));
}

function integer(name: keyof typeof integerLimits, raw: string, flag: string = name): number {
  const [min, max] = integerLimits[name];
  return integerIn(flag, raw, min, max);
}

function integerIn(flag: string, raw: string, min: number, max: number): number {
  if (!/^-?\d+$/.test(raw)) throw new OptionError(`--${flag} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  checkInteger(flag, value, min, max);
  return value;
}

function decimal(flag: string, raw: string, min: number, max: number): number {
  const value = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(value)) {
    throw new OptionError(`--${flag} must be a number, got "${raw}"`);
  }
  if (value < min || value > max) {
    throw new OptionError(`--${flag} must be from ${min} to ${max}, got ${value}`);
  }
  return value;
}

function checkInteger(flag: string, value: number, min: number, max: number): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new OptionError(`--${flag} must be a whole number from ${min} to ${max}, got ${value}`);
  }
}
