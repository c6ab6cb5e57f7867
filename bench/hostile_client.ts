import { io, type Socket } from 'socket.io-client';
import { measureJson, unlimitedJson } from '../schema/json_limits.js';
import { type StepJSON, type StepsAnswer, type SyncAnswer } from '../schema/events.js';

// The hostile client of `bench/hostile-block.ts`: bare Socket.io sockets speaking the wire
// protocol (no CollabClient, no rebasing, no pacing), and the legitimate-looking pastes with
// which it grows a document to the server's limits before the worst messages are sent.

/// A bare socket on document `docId` as client `clientID`; resolves once connected.
export function openSocket(url: string, docId: string, clientID: string): Promise<Socket> {
  const socket = io(url, {
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    query: { doc: docId },
    auth: { clientID },
  });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', (err) => {
      socket.close();
      reject(err);
    });
  });
}

/// Emits `event` with `payload` and resolves with the acknowledgement; rejects when the socket
/// is closed first (the server drops a socket whose frame exceeds its engine cap).
export function ask<T>(socket: Socket, event: string, payload: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const onClose = (reason: string) => reject(new Error(`socket closed: ${reason}`));
    socket.once('disconnect', onClose);
    socket.emit(event, payload, (answer: T) => {
      socket.off('disconnect', onClose);
      resolve(answer);
    });
  });
}

/// The outcome of an answer in a few characters: `accepted`, `ok`, or the refusal's code.
export function outcomeOf(answer: StepsAnswer | SyncAnswer): string {
  if (!answer.ok) return answer.code;
  return 'steps' in answer || 'doc' in answer ? 'ok' : 'accepted';
}

/// How a document is grown: `unit(n)` is the content of one paste of size `n` (paragraphs, or
/// characters), with the positions it adds.
export interface GrowthShape {
  unit(n: number): { content: unknown[]; positions: number };
  /// The largest `n` worth trying in one message (the message limit, the engine's frame cap).
  maxN: number;
}

/// One document as the hostile client sees it: a joined socket, the version it is at, and the
/// document's content size (`doc.content.size`), tracked from its own accepted steps.
export class HostileDoc {
  socket: Socket;
  version = 0;
  size = 0;
  readonly url: string;
  readonly docId: string;
  readonly clientID: string;

  private constructor(url: string, docId: string, clientID: string, socket: Socket) {
    this.url = url;
    this.docId = docId;
    this.clientID = clientID;
    this.socket = socket;
  }

  /// Connects and joins `docId`, which must be new (one empty paragraph, content size 2).
  static async open(url: string, docId: string, clientID: string): Promise<HostileDoc> {
    const doc = new HostileDoc(url, docId, clientID, await openSocket(url, docId, clientID));
    await doc.rejoin(doc.socket);
    if (doc.version !== 0) throw new Error(`${docId} is not a new document`);
    doc.size = 2;
    return doc;
  }

  /// Joins with `socket` (answered with the whole document) and takes it as this document's
  /// socket; returns the outcome.
  async rejoin(socket: Socket): Promise<string> {
    const answer = await ask<SyncAnswer>(socket, 'join', {});
    if (!answer.ok) throw new Error(`join ${this.docId}: ${answer.code} ${answer.message}`);
    this.socket = socket;
    this.version = answer.version;
    return 'ok';
  }

  /// Sends `steps` made at `version` (default: the current one). Advances the version when
  /// they are accepted; the caller updates `size`.
  async send(steps: readonly StepJSON[], version = this.version): Promise<StepsAnswer> {
    const answer = await ask<StepsAnswer>(this.socket, 'steps', { version, steps });
    if (answer.ok) this.version = answer.version;
    return answer;
  }

  /// Grows the document by pastes at position `at()` until a paste of one unit is refused
  /// three times running: each paste is one `replace` step. The paste size doubles after an
  /// accepted paste and halves after a `too-large` refusal (the document limit, or the time
  /// budget of `maxApplyMs`, which a busy machine can make a paste miss once). Returns the
  /// number of pastes sent. Throws on any other refusal.
  async grow(shape: GrowthShape, at: () => number, startN: number): Promise<number> {
    let n = Math.min(startN, shape.maxN);
    let sent = 0;
    let lastChances = 3;
    while (n >= 1) {
      const { content, positions } = shape.unit(n);
      const pos = at();
      const answer = await this.send([
        { stepType: 'replace', from: pos, to: pos, slice: { content } },
      ]);
      sent++;
      if (answer.ok) {
        this.size += positions;
        n = Math.min(n * 2, shape.maxN);
      } else if (answer.code === 'too-large') {
        if (n > 1) n = n >> 1;
        else if (--lastChances === 0) n = 0;
      } else {
        throw new Error(`paste into ${this.docId} refused: ${answer.code} ${answer.message}`);
      }
    }
    return sent;
  }

  close(): void {
    this.socket.close();
  }
}

/// Estimated bytes of `value` as the server's payload gate counts them.
export function gateBytes(value: unknown): number {
  const measured = measureJson(value, unlimitedJson);
  return measured.ok ? measured.bytes : Infinity;
}

/// Copies of one node (`node`, adding `positions`) as a growth shape whose pastes stay under
/// `maxBytes`.
export function repeatShape(node: unknown, positions: number, maxBytes: number): GrowthShape {
  // A paste costs the step's own fields (~100 bytes) plus each node and its comma.
  const each = gateBytes(node) + 1;
  return {
    unit: (n) => ({ content: new Array(n).fill(node), positions: n * positions }),
    maxN: Math.floor((maxBytes - 256) / each),
  };
}
