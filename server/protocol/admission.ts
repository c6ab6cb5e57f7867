import type { IncomingMessage } from 'node:http';
import proxyAddr from 'proxy-addr';
import { TokenBucket } from './token_bucket.js';

/// The caps admission enforces, from the server configuration (0 = no limit).
export interface AdmissionLimits {
  maxConnectionsPerIp: number;
  maxSocketsPerClient: number;
  maxDocumentsPerUser: number;
  newDocumentsPerMinute: number;
  handshakesPerMinute: number;
  trustProxy: readonly string[];
}

/// Who may connect, counted per client address, per client id of each user (or address) and in
/// distinct documents per user, how fast one address may create documents, and how fast one
/// address, and one user, may make handshakes. Counts are held while sockets are
/// connected and released when they leave; buckets of addresses that have been quiet long
/// enough to be full again are dropped, so nothing here grows with the number of addresses
/// ever seen.
export class Admission {
  private readonly perAddress = new Map<string, number>();
  /// By holder (`holderOf`) and client id: client ids are public (every broadcast carries
  /// them), so counted by the id alone, anyone's sockets under an editor's id (a reader's
  /// included) would fill its cap and lock the editor out.
  private readonly perClient = new Map<string, number>();
  /// By user (`holderOf`): the documents its sockets are on, and how many sockets on each.
  private readonly perUser = new Map<string, Map<string, number>>();
  private readonly creations = new Map<string, TokenBucket>();
  /// By `holderOf`: an address's handshakes, and a user's.
  private readonly handshakes = new Map<string, TokenBucket>();
  private readonly trust: (address: string, hop: number) => boolean;
  private lastSweep = 0;

  constructor(private readonly limits: AdmissionLimits) {
    this.trust = proxyAddr.compile([...limits.trustProxy]);
  }

  /// The client's address: the peer's, or, when the peer is a trusted proxy, the nearest
  /// untrusted address in `X-Forwarded-For`.
  address(request: IncomingMessage): string {
    return proxyAddr(request, this.trust);
  }

  /// Counts a socket of `address` and `clientID` on document `docId`, for `user` (null in
  /// open mode) in, or says which cap it hits ('address', 'client', or 'documents': its user
  /// has sockets on as many other documents as it may) and counts nothing.
  enter(
    address: string,
    clientID: string,
    user: string | null,
    docId: string,
  ): 'address' | 'client' | 'documents' | null {
    const fromAddress = this.perAddress.get(address) ?? 0;
    if (this.limits.maxConnectionsPerIp > 0 && fromAddress >= this.limits.maxConnectionsPerIp) {
      return 'address';
    }
    const holder = holderOf(address, user);
    const clientKey = `${holder}\n${clientID}`;
    const ofClient = this.perClient.get(clientKey) ?? 0;
    if (this.limits.maxSocketsPerClient > 0 && ofClient >= this.limits.maxSocketsPerClient) {
      return 'client';
    }
    // Every socket may load its document and keeps it in memory while it stays, so without
    // this one client could hold every one of `maxLoadedDocuments` by opening a socket on
    // each of as many documents, and the server would refuse everyone else's. Another socket
    // on a document the user already has open costs nothing more, and is let in.
    const documents = this.perUser.get(holder);
    const onDocument = documents?.get(docId) ?? 0;
    const max = this.limits.maxDocumentsPerUser;
    if (max > 0 && onDocument === 0 && (documents?.size ?? 0) >= max) return 'documents';
    this.perAddress.set(address, fromAddress + 1);
    this.perClient.set(clientKey, ofClient + 1);
    if (documents) documents.set(docId, onDocument + 1);
    else this.perUser.set(holder, new Map([[docId, 1]]));
    return null;
  }

  /// Counts a socket that `enter` admitted out again (with the same arguments).
  leave(address: string, clientID: string, user: string | null, docId: string): void {
    decrement(this.perAddress, address);
    const holder = holderOf(address, user);
    decrement(this.perClient, `${holder}\n${clientID}`);
    const documents = this.perUser.get(holder);
    if (!documents) return;
    decrement(documents, docId);
    if (documents.size === 0) this.perUser.delete(holder);
  }

  /// Asks whether `address` may create one more document now: 0 when it may (the creation is
  /// counted), otherwise milliseconds until it may.
  mayCreate(address: string, now: number = performance.now()): number {
    const perMinute = this.limits.newDocumentsPerMinute;
    if (perMinute === 0) return 0;
    let bucket = this.creations.get(address);
    if (!bucket) {
      bucket = new TokenBucket(perMinute / 60, perMinute, now);
      this.creations.set(address, bucket);
    }
    const wait = bucket.take(now);
    if (now - this.lastSweep > 60_000) this.sweep(now);
    return wait;
  }

  /// Asks whether `user`, or `address` when `user` is null, may make one more handshake now:
  /// 0 when it may (counted), otherwise milliseconds until it may. The protocol asks for the
  /// address before `authenticate` and for the user after. Every writer's handshake binds a
  /// client id (`ClientOwners`), and every handshake costs an `authenticate`: both are bounded
  /// by how fast anyone can make them.
  mayHandshake(address: string, user: string | null, now: number = performance.now()): number {
    const perMinute = this.limits.handshakesPerMinute;
    if (perMinute === 0) return 0;
    // Before the bucket is taken from: a sweep drops full ones, a new one among them.
    if (now - this.lastSweep > 60_000) this.sweep(now);
    const holder = holderOf(address, user);
    let bucket = this.handshakes.get(holder);
    if (!bucket) {
      bucket = new TokenBucket(perMinute / 60, perMinute, now);
      this.handshakes.set(holder, bucket);
    }
    return bucket.take(now);
  }

  /// Gives back a creation `mayCreate` counted for `address`, for a document that was not
  /// created after all (it existed, or another node serves it).
  giveBack(address: string): void {
    this.creations.get(address)?.give();
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const buckets of [this.creations, this.handshakes]) {
      for (const [key, bucket] of buckets) {
        if (bucket.full(now)) buckets.delete(key);
      }
    }
  }
}

/// Whom the documents of a socket are counted against: its user, as `authenticate` named it
/// (people behind one address, an office's, each have their own), or its address in open
/// mode, where nothing else tells clients apart. Prefixed, so that no user name can be taken
/// for an address.
function holderOf(address: string, user: string | null): string {
  return user === null ? `address ${address}` : `user ${user}`;
}

function decrement(map: Map<string, number>, key: string): void {
  const count = (map.get(key) ?? 0) - 1;
  if (count > 0) map.set(key, count);
  else map.delete(key);
}
