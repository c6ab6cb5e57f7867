import { decodeSegment, encodeSegment } from './archive.js';
import { docKeys } from './redis_keys.js';
import { script, type RedisConnection } from './redis_connection.js';
import { rewriteHistoryScript, segmentSteps } from './redis_scripts.js';
import type {
  ArchiveRewrite,
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  StoredName,
} from './store.js';

const rewriteScript = script(rewriteHistoryScript);
const segmentStepsScript = script(segmentSteps);

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

  async segment(
    docId: string,
    baseVersion: number,
    withCheckpoint = true,
  ): Promise<HistorySegment | null> {
    const keys = docKeys(this.keyPrefix, docId);
    const text = withCheckpoint
      ? await this.connection.command(keys.history, ['HGET', keys.history, String(baseVersion)])
      : await this.connection.run(segmentStepsScript, [keys.history], [String(baseVersion)]);
    if (text === null || text === undefined || text === '') return null;
    return decodeSegment(baseVersion, String(text), withCheckpoint);
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
