import { Node, type Schema } from 'prosemirror-model';
import { Step } from 'prosemirror-transform';
import { measureJson, type JsonLimits } from '../../schema/json_limits.js';
import { nodeStats } from '../../schema/doc_size.js';
import { type StepJSON } from '../../schema/events.js';
import { Authority, type AuthorityLimits } from '../core/authority.js';
import { stepProblem } from '../core/step_check.js';
import type { JournalEntry, Snapshot, StoredDocument } from '../stores/store.js';
import { CorruptDocumentError } from './load_errors.js';

/// The limits a stored document is checked against, and the authority's.
export interface RestoreOptions extends AuthorityLimits {
  /// Nesting allowed in stored JSON, checked before it is parsed into a document.
  maxJsonDepth: number;
  /// This server's schema version: a snapshot written by a newer one is refused.
  schemaVersion: number;
}

/// A stored document turned back into what a room serves.
export interface Restored {
  authority: Authority;
  /// The version of the snapshot it started from (0 without one).
  snapshotVersion: number;
  /// Each client's last batch in the document: the snapshot's, then the journal's after it.
  clients: Map<string, number>;
}

/// The schema's smallest valid document (one empty paragraph in ours): what a new document
/// starts as. Throws `TypeError` when the schema cannot make one.
export function emptyDoc(schema: Schema): Node {
  const doc = schema.topNodeType.createAndFill();
  if (!doc) throw new TypeError('the schema cannot make an empty document');
  return doc;
}

/// Turns `stored` back into an authority: its snapshot (or an empty document), then every
/// journal step after it, each checked as a client's step is. Pure: no I/O, nothing kept.
/// Throws `CorruptDocumentError` when the stored data cannot be served as it is: JSON that
/// does not parse into the schema or nests past `maxJsonDepth`, a snapshot of a newer schema,
/// journal entries that overlap, leave a gap or do not apply, a document over the size or
/// depth limits, or a journal that ends elsewhere than the store says.
export function restoreDocument(
  docId: string,
  stored: StoredDocument,
  schema: Schema,
  options: RestoreOptions,
): Restored {
  const snapshot = stored.snapshot;
  const doc = snapshot ? snapshotDoc(docId, snapshot, schema, options) : emptyDoc(schema);
  const authority = new Authority(doc, snapshot ? snapshot.version : 0, options);
  const clients = new Map<string, number>(
    snapshot?.clients ? Object.entries(snapshot.clients) : [],
  );
  replay(docId, stored.journal, authority, clients, schema, options);
  // A journal can nest a document past the depth limit by wraps that each look harmless (kept
  // under a higher limit, or written by something else); serving it would overflow the stack
  // in the first snapshot.
  const height = nodeStats(authority.doc).height;
  if (height > options.maxDocDepth) {
    throw new CorruptDocumentError(
      docId,
      `the document is nested ${height} levels deep, more than ${options.maxDocDepth}`,
    );
  }
  checkSize(docId, 'the document', authority.doc, options);
  if (authority.version !== stored.version) {
    throw new CorruptDocumentError(
      docId,
      `journal ends at ${authority.version}, the store says ${stored.version}`,
    );
  }
  return { authority, snapshotVersion: snapshot ? snapshot.version : 0, clients };
}

/// prosemirror-model parses and checks documents recursively: stored JSON nested deeper than
/// any document the limits allow is refused before it can overflow the stack.
function jsonLimits(options: RestoreOptions): JsonLimits {
  return { maxDepth: options.maxJsonDepth, maxBytes: Infinity, maxStringBytes: Infinity };
}

/// A stored document over the size limits (kept by a server with higher limits, or written by
/// something else) is quarantined, with the limit to raise in the operator's log line. Served,
/// it could only shrink, and one over the socket buffer would end every join in a
/// slow-consumer disconnect: a reconnect loop instead of an answer.
function checkSize(docId: string, what: string, doc: Node, options: RestoreOptions): void {
  const { maxDocBytes, maxDocSize } = options;
  const bytes = nodeStats(doc).bytes;
  if (bytes > maxDocBytes || doc.nodeSize > maxDocSize) {
    throw new CorruptDocumentError(
      docId,
      `${what} is larger than this server allows (${bytes} bytes of JSON, ${doc.nodeSize} positions; MAX_DOC_BYTES ${maxDocBytes}, MAX_DOC_SIZE ${maxDocSize})`,
    );
  }
}

/// The snapshot's document, checked against the schema and the limits.
function snapshotDoc(
  docId: string,
  snapshot: Snapshot,
  schema: Schema,
  options: RestoreOptions,
): Node {
  const measured = measureJson(snapshot.doc, jsonLimits(options));
  if (!measured.ok) throw new CorruptDocumentError(docId, `snapshot: ${measured.message}`);
  if (snapshot.schemaVersion > options.schemaVersion) {
    throw new CorruptDocumentError(
      docId,
      `snapshot written with schema version ${snapshot.schemaVersion}, this server has ${options.schemaVersion}`,
    );
  }
  let doc: Node;
  try {
    doc = Node.fromJSON(schema, snapshot.doc);
    doc.check();
  } catch (err) {
    throw new CorruptDocumentError(docId, `snapshot: ${(err as Error).message}`);
  }
  checkSize(docId, 'the snapshot', doc, options);
  return doc;
}

/// Applies the journal entries past the authority's version, recording each client's last
/// batch in `clients`.
function replay(
  docId: string,
  journal: readonly JournalEntry[],
  authority: Authority,
  clients: Map<string, number>,
  schema: Schema,
  options: RestoreOptions,
): void {
  let previousEnd: number | null = null;
  for (const entry of journal) {
    const end = entry.baseVersion + entry.steps.length;
    // Each entry starts where the one before ended: one that starts before would say twice
    // what a version holds, one that starts after leaves a gap.
    if (previousEnd !== null && entry.baseVersion !== previousEnd) {
      throw new CorruptDocumentError(
        docId,
        `journal entries do not follow each other: one ends at ${previousEnd}, the next starts at ${entry.baseVersion}`,
      );
    }
    previousEnd = end;
    if (end <= authority.version) continue;
    if (entry.baseVersion > authority.version) {
      throw new CorruptDocumentError(
        docId,
        `journal gap: entry at ${entry.baseVersion}, document at ${authority.version}`,
      );
    }
    const skip = authority.version - entry.baseVersion;
    const { steps, doc } = applyEntry(docId, entry.steps.slice(skip), authority, schema, options);
    for (let i = skip; i < entry.clientIDs.length; i++)
      clients.set(entry.clientIDs[i]!, entry.baseVersion + i + 1);
    authority.remember(steps, entry.clientIDs.slice(skip), doc);
  }
}

/// Parses and applies `stepsJSON` to the authority's document; returns the steps and the
/// document after them.
function applyEntry(
  docId: string,
  stepsJSON: readonly StepJSON[],
  authority: Authority,
  schema: Schema,
  options: RestoreOptions,
): { steps: Step[]; doc: Node } {
  const limits = jsonLimits(options);
  const steps: Step[] = new Array(stepsJSON.length);
  let current = authority.doc;
  for (let i = 0; i < stepsJSON.length; i++) {
    const where = `journal step ${authority.version + i}`;
    const measured = measureJson(stepsJSON[i], limits);
    if (!measured.ok) throw new CorruptDocumentError(docId, `${where}: ${measured.message}`);
    let result;
    try {
      steps[i] = Step.fromJSON(schema, stepsJSON[i]);
      // A journal can hold steps the step checks refuse (written before them, or by something
      // else): replaces with from > to, each doubling the document, would hold the loop and
      // take gigabytes before anything else notices.
      const problem = stepProblem(steps[i]!.toJSON() as StepJSON);
      if (problem) throw new RangeError(problem);
      result = steps[i]!.apply(current);
    } catch (err) {
      throw new CorruptDocumentError(docId, `${where}: ${(err as Error).message}`);
    }
    if (!result.doc) throw new CorruptDocumentError(docId, `${where}: ${result.failed}`);
    current = result.doc;
  }
  return { steps, doc: current };
}
