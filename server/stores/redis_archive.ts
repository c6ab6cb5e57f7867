import { entryEnd, parseJournalEntry, parseSnapshot } from './journal_entry.js';
import { docKeys } from './redis_keys.js';
import { script, type RedisConnection } from './redis_connection.js';
import { rewriteHistoryScript } from './redis_scripts.js';
import type {
  ArchiveRewrite,
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  JournalEntry,
  StoredName,
} from './store.js';

const rewriteScript = script(rewriteHistoryScript);

/// `RedisStore`'s history archive. The snapshot script writes segments (see `snapshotScript`);
/// this reads them, keeps names, and applies retention's rewrites, all on the document's keys
/// (one hash slot).
export class RedisArchive implements HistoryArchive {
  constructor(
    private readonly connection: RedisConnection,
    private readonly keyPrefix: string,
  ) {}

  async bases(docId: string): Promise<number[]> {
    const keys = docKeys(this.keyPrefix, docId);
    const fields = (await this.connection.command(keys.history, [
      'HKEYS',
      keys.history,
    ])) as unknown[];
    return fields.map(Number).sort((a, b) => a - b);
  }

  async segment(docId: string, baseVersion: number): Promise<HistorySegment | null> {
    const keys = docKeys(this.keyPrefix, docId);
    const text = await this.connection.command(keys.history, [
      'HGET',
      keys.history,
      String(baseVersion),
    ]);
    if (text === null || text === undefined) return null;
    return decodeSegment(baseVersion, String(text));
  }

  async windows(docId: string): Promise<CoarseWindow[]> {
    const keys = docKeys(this.keyPrefix, docId);
    const text = await this.connection.command(keys.windows, ['GET', keys.windows]);
    return text ? (JSON.parse(String(text)) as CoarseWindow[]) : [];
  }

  async names(docId: string): Promise<StoredName[]> {
    const keys = docKeys(this.keyPrefix, docId);
    const values = (await this.connection.command(keys.names, ['HVALS', keys.names])) as unknown[];
    return values
      .map((value) => JSON.parse(String(value)) as StoredName)
      .sort((a, b) => a.at - b.at);
  }

  async addName(docId: string, name: StoredName): Promise<void> {
    const keys = docKeys(this.keyPrefix, docId);
    await this.connection.command(keys.names, [
      'HSET',
      keys.names,
      String(name.version),
      JSON.stringify(name),
    ]);
  }

  async stats(docId: string): Promise<{ bytes: number; generation: number }> {
    const keys = docKeys(this.keyPrefix, docId);
    const [bytes, generation] = (await this.connection.command(keys.historyMeta, [
      'HMGET',
      keys.historyMeta,
      'bytes',
      'generation',
    ])) as (string | null)[];
    return { bytes: Number(bytes ?? 0), generation: Number(generation ?? 0) };
  }

  async rewrite(docId: string, generation: number, change: ArchiveRewrite): Promise<boolean> {
    const keys = docKeys(this.keyPrefix, docId);
    const args = [String(generation), JSON.stringify(change.windows), String(change.remove.length)];
    for (const base of change.remove) args.push(String(base));
    for (const segment of change.add)
      args.push(String(segment.baseVersion), encodeSegment(segment));
    const reply = await this.connection.run(
      rewriteScript,
      [keys.history, keys.historyMeta, keys.windows],
      args,
    );
    return reply === 'ok';
  }
}

/// A segment as the snapshot script writes it: the checkpoint's JSON ('' for none), then each
/// entry as the journal holds it (`<end>\n<entry JSON>`), one per line.
export function encodeSegment(segment: HistorySegment): string {
  let text = segment.checkpoint ? JSON.stringify(segment.checkpoint) : '';
  for (const entry of segment.entries) text += `\n${entryEnd(entry)}\n${JSON.stringify(entry)}`;
  return text;
}

/// Reads back a segment written by the snapshot script or `encodeSegment`. Throws a
/// `TypeError` for text that is not one.
export function decodeSegment(baseVersion: number, text: string): HistorySegment {
  const lines = text.split('\n');
  if (lines.length % 2 !== 1) throw new TypeError('redis store: a history segment is cut short');
  const checkpoint = lines[0] === '' ? null : parseSnapshot(JSON.parse(lines[0]!));
  const entries: JournalEntry[] = [];
  for (let i = 1; i < lines.length; i += 2)
    entries.push(parseJournalEntry(JSON.parse(lines[i + 1]!)));
  return { baseVersion, checkpoint, entries };
}
