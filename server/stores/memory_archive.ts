import { segmentBytes } from './archive.js';
import type {
  ArchiveRewrite,
  CoarseWindow,
  HistoryArchive,
  HistorySegment,
  StoredName,
} from './store.js';

interface ArchiveRecord {
  segments: Map<number, HistorySegment>;
  windows: CoarseWindow[];
  names: StoredName[];
  generation: number;
}

/// `MemoryStore`'s history archive: segments kept in this process, lost with it.
export class MemoryArchive implements HistoryArchive {
  private readonly records = new Map<string, ArchiveRecord>();

  /// Keeps `segment` (the one a snapshot of `docId` archives); replaces one at the same base.
  keep(docId: string, segment: HistorySegment): void {
    this.record(docId).segments.set(segment.baseVersion, segment);
  }

  async bases(docId: string): Promise<number[]> {
    const record = this.records.get(docId);
    return record ? [...record.segments.keys()].sort((a, b) => a - b) : [];
  }

  async segment(docId: string, baseVersion: number): Promise<HistorySegment | null> {
    return this.records.get(docId)?.segments.get(baseVersion) ?? null;
  }

  async windows(docId: string): Promise<CoarseWindow[]> {
    return (this.records.get(docId)?.windows ?? []).slice();
  }

  async names(docId: string): Promise<StoredName[]> {
    return (this.records.get(docId)?.names ?? []).slice();
  }

  async addName(docId: string, name: StoredName): Promise<void> {
    const record = this.record(docId);
    record.names = record.names.filter((named) => named.version !== name.version);
    record.names.push(name);
  }

  async stats(docId: string): Promise<{ bytes: number; generation: number }> {
    const record = this.records.get(docId);
    if (!record) return { bytes: 0, generation: 0 };
    let bytes = JSON.stringify(record.windows).length + JSON.stringify(record.names).length;
    for (const segment of record.segments.values()) bytes += segmentBytes(segment);
    return { bytes, generation: record.generation };
  }

  async rewrite(docId: string, generation: number, change: ArchiveRewrite): Promise<boolean> {
    const record = this.record(docId);
    if (record.generation !== generation) return false;
    for (const base of change.remove) record.segments.delete(base);
    for (const segment of change.add) record.segments.set(segment.baseVersion, segment);
    record.windows = change.windows.slice();
    record.generation++;
    return true;
  }

  /// Forgets everything of every document (the store is closed).
  clear(): void {
    this.records.clear();
  }

  private record(docId: string): ArchiveRecord {
    let record = this.records.get(docId);
    if (!record) {
      record = { segments: new Map(), windows: [], names: [], generation: 0 };
      this.records.set(docId, record);
    }
    return record;
  }
}
