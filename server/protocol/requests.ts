import type { ErrorAnswer, SyncRequest } from '../../schema/events.js';
import { refusal, tokenExpired } from './answers.js';
import { hasExpired, type SocketData } from './socket.js';
import type { Room } from '../rooms/room.js';

// What a client sends, checked before anything acts on it: the handshake's URL, the host's
// identity, and the `join`, `pull` and `steps` payloads. Each check returns why the input is
// refused (a reason, or the refusal itself), never throws: payloads are raw JSON, already
// bounded by the payload gate.

/// Narrows a `join`/`pull` payload; returns a reason string when it is malformed.
export function parseSyncRequest(value: unknown): SyncRequest | string {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value))
    return 'expects an object {version?, epoch?}';
  const { version, epoch } = value as Record<string, unknown>;
  if (version !== undefined && !isVersion(version)) return 'version must be a whole number ≥ 0';
  if (epoch !== undefined && (typeof epoch !== 'string' || epoch.length > 64)) {
    return 'epoch must be a string of at most 64 characters';
  }
  const request: SyncRequest = {};
  if (version !== undefined) request.version = version;
  if (epoch !== undefined) request.epoch = epoch as string;
  return request;
}

/// Checks a `steps` message before it reaches the room: the socket must have joined and may
/// write (not read-only, its token not expired, the server not `draining`), and the payload
/// must be `{version, steps}` with a non-empty array of objects. Returns the refusal, at the
/// room's published version once there is a room, or null when the room should take it.
export function checkSteps(
  data: SocketData,
  room: Room | null,
  request: unknown,
  draining: boolean,
): ErrorAnswer | null {
  if (!room) return refusal('bad-request', 'Send join before steps');
  const version = room.publishedVersion;
  if (draining) return refusal('shutting-down', undefined, version);
  if (data.readOnly) return refusal('forbidden', 'This connection is read-only', version);
  if (hasExpired(data)) return refusal('unauthorized', tokenExpired, version);
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    return refusal('bad-request', 'steps expects {version, steps}', version);
  }
  const fields = request as Record<string, unknown>;
  if (!isVersion(fields['version'])) {
    return refusal('bad-request', 'version must be a whole number ≥ 0', version);
  }
  const steps = fields['steps'];
  if (!Array.isArray(steps) || steps.length === 0) {
    return refusal('bad-request', 'steps must be a non-empty array', version);
  }
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    if (typeof step !== 'object' || step === null || Array.isArray(step)) {
      return refusal('invalid-step', `Step ${i} is not an object`, version);
    }
  }
  return null;
}

function isVersion(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/// Why `value`, as the host's `authenticate` resolved it, is not an `Identity`, or null when
/// it is one.
export function identityProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return 'not an object';
  const { user, access, expiresAt } = value as Record<string, unknown>;
  if (typeof user !== 'string' || user === '' || user.length > 256) {
    return 'user must be a string of 1 to 256 characters';
  }
  if (access !== 'read' && access !== 'write') return "access must be 'read' or 'write'";
  if (expiresAt !== undefined && (typeof expiresAt !== 'number' || Number.isNaN(expiresAt))) {
    return 'expiresAt must be a number (ms since the epoch) when given';
  }
  return null;
}

/// A `doc` value as a gateway can read it: the id's own characters, with ':' as it is or
/// percent-encoded (socket.io-client encodes it).
const routableDoc = /^(?:[A-Za-z0-9._:-]|%3[Aa])+$/;
/// A path as nginx matches it: no empty or dot segment, no escape (it normalises those before
/// choosing a location, and passes the path on as sent).
const routablePath = /^(?:\/[^/.%][^/%]*)*\/?$/;

/// Why the handshake's URL names its document otherwise than a gateway in front would route it
/// (null when it does not). The gateway hashes `$arg_doc`: the first query key that is `doc` in
/// any letter case, its value decoded only of `%3A` (deploy/nginx.ts), while Engine.IO reads
/// the last key that decodes to exactly `doc`, decoded whole. So: one key that is `doc` in
/// any spelling, spelled `doc`, whose value escapes nothing but ':'. Else `?DOC=a&doc=b`, or
/// `?doc=%61`, would be served as a document the gateway sends to another node (a writer
/// there has two nodes take the document from each other). Likewise a path the gateway
/// normalises (`/socket.io/../docs/x?doc=y` is routed as `GET /docs/x`, and Engine.IO takes it
/// as its own). `doc` is the id Engine.IO read, already checked against the id pattern.
export function spellingProblem(url: string | undefined, doc: string): string | null {
  const queryAt = url?.indexOf('?') ?? -1;
  if (queryAt < 0) return 'The document must be named in the query, as doc';
  if (!routablePath.test(url!.slice(0, queryAt))) {
    return 'The path must have no empty or dot segments and no escapes';
  }
  let value: string | null = null;
  let keys = 0;
  for (const pair of url!.slice(queryAt + 1).split('&')) {
    const equals = pair.indexOf('=');
    const key = equals < 0 ? pair : pair.slice(0, equals);
    if (key.toLowerCase() !== 'doc' && decodeKey(pair).toLowerCase() !== 'doc') continue;
    keys++;
    if (key === 'doc' && equals >= 0) value = pair.slice(equals + 1);
  }
  if (keys !== 1 || value === null) {
    return 'The document must be named once, as doc (in lower case, and no other key spelled so)';
  }
  if (!routableDoc.test(value) || value.replace(/%3a/gi, ':') !== doc) {
    return "The document id must be sent with no escapes but ':' as %3A";
  }
  return null;
}

/// A query key (of a pair without '&') as URLSearchParams, so Engine.IO, decodes it. After
/// an '&', as in the query: alone, a leading '?' would be dropped.
function decodeKey(pair: string): string {
  return new URLSearchParams(`&${pair}`).keys().next().value ?? '';
}
