import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { docIdPattern } from '../../../schema/events.js';
import { parseJournalEntry, parseLines } from '../journal_entry.js';
import type { JournalEntry } from '../store.js';

// The on-disk format of the write-ahead log (docs/file-store.md, "The write-ahead log"):
// files `log.<generation>.wal`, each a sequence of framed rounds of record lines, followed by
// the zeros written ahead of them.

/// One record of the shared log: a journal entry and the document (and epoch) it extends.
export interface LogRecord {
  docId: string;
  epoch: string;
  entry: JournalEntry;
}

/// The name of a log file, and the generation it holds.
export const logFileName = /^log\.(\d{1,15})\.wal$/;

/// The log file of `generation` in `dir`.
export function logPath(dir: string, generation: number): string {
  return join(dir, `log.${String(generation).padStart(8, '0')}.wal`);
}

/// One line of the log for an entry already serialized as `entryJSON` (an object literal):
/// the document's id and epoch are spliced in front, so the steps are stringified once.
export function logLine(docId: string, epoch: string, entryJSON: string): string {
  return `{"docId":${JSON.stringify(docId)},"epoch":${JSON.stringify(epoch)},${entryJSON.slice(1)}\n`;
}

/// One framed round of the log holding `lines` (whole lines): the header line
/// `#<bytes> <crc32>`, then the lines' bytes.
export function frameRound(lines: string): Buffer {
  const body = Buffer.from(lines, 'utf8');
  const header = `#${body.length} ${crc32(body).toString(16).padStart(8, '0')}\n`;
  const round = Buffer.allocUnsafe(header.length + body.length);
  round.write(header, 0, 'latin1');
  body.copy(round, header.length);
  return round;
}

const hash = 0x23; // '#', which starts a round's header; a record line starts with '{'.
const newline = 0x0a;
const zero = 0x00; // never in a round: what the file holds where no round was written
const roundHeader = /^#(\d{1,10}) ([0-9a-f]{8})$/;

/// The records of one log file's `bytes`. A file of bare record lines (it starts with neither
/// '#' nor a zero: directories written by earlier versions) is read line by line, a torn last
/// line dropped; any other file is read as framed rounds (`readRounds`). Throws a `TypeError`
/// naming `path` for damage that may hide acknowledged steps.
export function readLogFile(bytes: Buffer, path: string): LogRecord[] {
  if (bytes.length > 0 && bytes[0] !== hash && bytes[0] !== zero) {
    const text = bytes.toString('utf8');
    const complete = text.lastIndexOf('\n') + 1;
    return parseLines(text, complete, parseRecord, 'write-ahead log', path);
  }
  return readRounds(bytes, path);
}

/// The records of a file of framed rounds. It ends at its end, at the zeros written ahead of
/// the rounds, or at a round whose write never completed: cut short by the end of the file,
/// or with zeros where some of its pages did not reach the disk. The latter two were never
/// acknowledged, so they are dropped, unless a whole round follows (then its commits were
/// acknowledged after the damage, and it throws).
function readRounds(bytes: Buffer, path: string): LogRecord[] {
  const records: LogRecord[] = [];
  let at = 0;
  const damaged = (what: string, cause?: unknown): TypeError =>
    new TypeError(`corrupt write-ahead log in ${path} at byte ${at}: ${what}`, { cause });
  const torn = (): LogRecord[] => {
    const whole = wholeRoundAfter(bytes, at);
    if (whole !== -1) throw damaged(`a whole round follows at byte ${whole}`);
    return records;
  };
  while (at < bytes.length) {
    if (bytes[at] === zero) return torn();
    const end = bytes.indexOf(newline, at);
    // A header cut short: the last write never completed.
    if (end === -1) return torn();
    const header = roundHeader.exec(bytes.toString('latin1', at, end));
    if (!header) {
      if (bytes.subarray(at, end).includes(zero)) return torn();
      throw damaged('not a round header');
    }
    const length = Number(header[1]);
    const start = end + 1;
    // A round cut short: the same.
    if (start + length > bytes.length) return torn();
    const body = bytes.subarray(start, start + length);
    if (crc32(body) !== parseInt(header[2]!, 16)) {
      if (body.includes(zero)) return torn();
      throw damaged('checksum mismatch');
    }
    if (length === 0 || body[length - 1] !== newline) throw damaged('round not made of lines');
    const text = body.toString('utf8');
    try {
      for (const record of parseLines(text, text.length, parseRecord, 'write-ahead log', path))
        records.push(record);
    } catch (error) {
      throw damaged('a record does not parse', error);
    }
    at = start + length;
  }
  return records;
}

/// The offset of the first whole round (a header whose length and checksum its body matches)
/// that starts after `from`, or -1. At a clean end this is one search for a '#' in the zeros
/// ahead of the rounds.
function wholeRoundAfter(bytes: Buffer, from: number): number {
  for (let at = bytes.indexOf(hash, from + 1); at !== -1; at = bytes.indexOf(hash, at + 1)) {
    // A header is at most 21 bytes with its newline: look no further (a '#' in a long line of
    // text would otherwise search the rest of that line, once per '#').
    const within = bytes.subarray(at, at + 21).indexOf(newline);
    if (within === -1) continue;
    const end = at + within;
    const header = roundHeader.exec(bytes.toString('latin1', at, end));
    if (!header) continue;
    const length = Number(header[1]);
    if (length === 0 || end + 1 + length > bytes.length) continue;
    if (crc32(bytes.subarray(end + 1, end + 1 + length)) === parseInt(header[2]!, 16)) return at;
  }
  return -1;
}

function parseRecord(raw: unknown): LogRecord {
  const entry = parseJournalEntry(raw);
  const { docId, epoch } = raw as Record<string, unknown>;
  if (typeof docId !== 'string' || !docIdPattern.test(docId) || typeof epoch !== 'string')
    throw new TypeError('write-ahead log record: bad docId or epoch');
  return { docId, epoch, entry };
}
