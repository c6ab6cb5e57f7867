import { docIdPattern } from '../../schema/events.js';

/// The Redis keys of one document. All three carry the document id as a `{hash tag}`, so they
/// live in one Redis Cluster slot and one Lua script may touch them together.
export interface DocKeys {
  /// Hash: `version` (end of the journal), `epoch`, `snapshotVersion` (absent until a
  /// snapshot is stored).
  meta: string;
  /// List of journal entries, oldest first, each encoded by `encodeJournalEntry`.
  journal: string;
  /// String: the newest snapshot as JSON.
  snapshot: string;
  /// String with an expiry: the lease, `<holder>#<fence>` of the process serving the document.
  lease: string;
  /// Counter: the last fencing number handed out for this document (never reset while the
  /// document exists; a lease released on a document never written drops it, with `home`).
  fence: string;
  /// String with an expiry: the holder of another process that asked for the document.
  wanted: string;
  /// String: the node the document belongs on (the gateway's choice); a node serving it while
  /// that node is down stands in for it, and gives it back when it returns.
  home: string;
  /// Hash: the history's archived segments, field = base version, value encoded by
  /// `encodeSegment` (see redis_archive.ts).
  history: string;
  /// Hash: `bytes` (the archive's size) and `generation` (bumped by every retention rewrite).
  historyMeta: string;
  /// String: the coarse windows of old history, as JSON.
  windows: string;
  /// Hash: named versions, field = version, value the name's JSON.
  names: string;
}

/// The one place where Redis keys are built: `<prefix>{<docId>}:meta`, `:journal`,
/// `:snapshot`, `:lease`, `:fence`, `:wanted`, `:home`, and the history's `:history`,
/// `:history-meta`, `:windows` and `:names`. Returns the keys; throws a `TypeError` for a document id outside
/// `docIdPattern` (such an id, with a `}` in it, would break the hash tag).
export function docKeys(prefix: string, docId: string): DocKeys {
  if (!docIdPattern.test(docId)) throw new TypeError(`invalid document id: ${docId}`);
  const base = `${prefix}{${docId}}:`;
  return {
    meta: base + 'meta',
    journal: base + 'journal',
    snapshot: base + 'snapshot',
    lease: base + 'lease',
    fence: base + 'fence',
    wanted: base + 'wanted',
    home: base + 'home',
    history: base + 'history',
    historyMeta: base + 'history-meta',
    windows: base + 'windows',
    names: base + 'names',
  };
}

/// The liveness key of a server node: `<prefix>node:<node id>`. It has no hash tag, so on a
/// Redis Cluster it hashes to a slot of its own; no script reads it with a document's keys.
export function nodeKey(prefix: string, node: string): string {
  return `${prefix}node:${node}`;
}
