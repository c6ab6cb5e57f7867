import type { ErrorCode } from './errors.js';

/// A step as JSON (`Step.toJSON()`): an object with a `stepType` and that type's fields.
export interface StepJSON {
  stepType: string;
  [field: string]: unknown;
}

/// A document as JSON (`Node.toJSON()`).
export interface DocJSON {
  type: string;
  [field: string]: unknown;
}

/// Document ids: 1–128 characters of `A-Z a-z 0-9 . _ : -` (safe in URLs, Redis keys and file
/// names alike), except `.` and `..`, which name directories in a path.
export const docIdPattern = /^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$/;

/// Client ids: 1–64 characters of the same alphabet. Chosen by the client and stable for one
/// editor session across reconnects, so that prosemirror-collab can recognise its own steps.
export const clientIdPattern = /^[A-Za-z0-9._:-]{1,64}$/;

/// What a client sends in the Socket.io handshake `auth` object.
export interface HandshakeAuth {
  clientID: string;
  /// An observer: receives every step but may not send any (`forbidden`).
  readOnly?: boolean;
}

/// What a client sends in the handshake query string.
export interface HandshakeQuery {
  doc: string;
}

/// A refusal, in any acknowledgement. `version` is the server's version when it is known, so a
/// client answered `stale` knows which broadcast to wait for.
export interface ErrorAnswer {
  ok: false;
  code: ErrorCode;
  message: string;
  retryable: boolean;
  version?: number;
  /// With `rate-limited`: wait this long before sending again.
  retryAfterMs?: number;
  /// With `too-large`, only when a step would have made the document larger than it may be:
  /// how much the document at `version` may still grow. Absent from servers that predate it.
  room?: DocRoom;
}

/// How much a document may still grow: `bytes` of its JSON as `nodeStats` estimates it
/// (`MAX_DOC_BYTES`) and ProseMirror `positions` (`nodeSize`, `MAX_DOC_SIZE`). Negative when the
/// document is already larger (a limit lowered since it grew). The server refuses a step that
/// makes the document grow past either, and takes any step that does not make it grow: a client
/// that sends no step which would can drop, without sending it, each one that would.
export interface DocRoom {
  bytes: number;
  positions: number;
}

/// `join` and `pull` requests. Without `version` (or with an `epoch` other than the server's)
/// the answer carries the whole document.
export interface SyncRequest {
  version?: number;
  epoch?: string;
}

/// What one `steps` message may hold on this server, sent with every answer to `join` so that a
/// client sizes its batches to fit, and drops a step the server would refuse without sending
/// it: a message whose JSON is over `maxMessageBytes` is refused `too-large`, and one over twice
/// that closes the connection before it can be answered.
export interface BatchLimits {
  maxMessageBytes: number;
  maxStepsPerBatch: number;
  /// The longest string a message may hold anywhere but as the value of a `text` key (a text
  /// node's content): an image's `src`, a link's `href`, any attribute, type or mark name.
  /// Counted in UTF-16 code units (JavaScript's `length`), not bytes, whatever the name (that
  /// of the server's MAX_ATTRIBUTE_BYTES setting); keys are not counted. A message holding a
  /// longer one is refused `too-large` before it is read, and each such refusal is a strike
  /// against the connection. Absent from servers that predate it.
  maxAttributeBytes?: number;
  /// The deepest nesting of objects and arrays a message may hold, the message itself being
  /// depth 1 (so a step of a `steps` message is at depth 3): deeper is refused `too-deep`, a
  /// strike too. Absent from servers that predate it.
  maxJsonDepth?: number;
}

/// The whole document at `version`.
export interface DocAnswer {
  ok: true;
  epoch: string;
  version: number;
  doc: DocJSON;
  /// The version after the last batch of the asking connection's client id that `doc`
  /// contains, when the server knows of one. A client whose batch was in flight when its
  /// connection dropped compares it with the end of its last batch it saw confirmed: greater
  /// means the lost batch is in `doc`, and re-applying it would apply it twice.
  acceptedThrough?: number;
  /// Sent with answers to `join`.
  limits?: BatchLimits;
}

/// Every step after the requested version, up to `version`.
export interface StepsSinceAnswer {
  ok: true;
  epoch: string;
  version: number;
  steps: StepJSON[];
  clientIDs: string[];
  /// Sent with answers to `join`.
  limits?: BatchLimits;
}

export type SyncAnswer = DocAnswer | StepsSinceAnswer | ErrorAnswer;

/// A batch of steps made at `version`.
export interface StepsRequest {
  version: number;
  steps: StepJSON[];
}

export type StepsAnswer = { ok: true; version: number } | ErrorAnswer;

/// Confirmed steps, sent to every socket of a document's room. `version` is the version after
/// the last step; the first step applies at `version - steps.length`.
export interface StepsBroadcast {
  version: number;
  steps: StepJSON[];
  clientIDs: string[];
}

/// Sent before the server closes a socket on purpose (shutdown, unload): reconnect after
/// `retryAfterMs`.
export interface ClosingNotice {
  code: ErrorCode;
  message: string;
  retryAfterMs: number;
}

/// Longest presence `name` the server relays, in UTF-16 code units.
export const presenceNameMaxLength = 64;

/// Presence colours: CSS hex colours `#rrggbb`, so that no client can inject other CSS.
export const presenceColorPattern = /^#[0-9A-Fa-f]{6}$/;

/// Where an editor's selection is, sent by the client after joining and whenever it moves.
/// `anchor` and `head` are positions in the document at `version` (the sender maps its
/// selection back through its unconfirmed steps first), so that receivers can map them forward
/// through the steps they apply. Not acknowledged, not stored.
export interface PresenceUpdate {
  version: number;
  anchor: number;
  head: number;
  /// 1–`presenceNameMaxLength` characters, shown next to the caret.
  name: string;
  /// Matches `presenceColorPattern`.
  color: string;
}

/// A presence update relayed to the rest of a document's room, with the sender's client id.
export interface PresenceBroadcast extends PresenceUpdate {
  clientID: string;
}

/// Sent to a document's room when the last socket of a client id has left it.
export interface PresenceLeave {
  clientID: string;
}

/// Events a client sends. Each but `presence` takes an acknowledgement callback.
export interface ClientToServerEvents {
  join: (request: SyncRequest, ack: (answer: SyncAnswer) => void) => void;
  pull: (request: SyncRequest, ack: (answer: SyncAnswer) => void) => void;
  steps: (request: StepsRequest, ack: (answer: StepsAnswer) => void) => void;
  presence: (update: PresenceUpdate) => void;
}

/// Events the server sends.
export interface ServerToClientEvents {
  steps: (broadcast: StepsBroadcast) => void;
  /// A message the server could not answer through an acknowledgement (an unknown event, an
  /// event sent without an acknowledgement callback).
  'protocol-error': (error: { code: ErrorCode; message: string; event: string }) => void;
  closing: (notice: ClosingNotice) => void;
  /// Another editor's selection (see `PresenceUpdate`).
  presence: (presence: PresenceBroadcast) => void;
  'presence-leave': (leave: PresenceLeave) => void;
}
