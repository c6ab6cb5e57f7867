import type { Rooms } from './rooms/registry.js';
import type { Store } from './stores/store.js';

/// `Collab.stats()`: counts read when called.
export interface CollabStats {
  /// Documents held in memory.
  documents: number;
  /// Connected editors (sockets), over every attached namespace.
  editors: number;
  /// Documents refused as `corrupt` right now (quarantined).
  quarantined: number;
  /// Loads that found damaged stored data, since start.
  corruptLoads: number;
  /// Documents closed because serving them threw, since start; their editors reloaded.
  roomFailures: number;
}

/// `Collab.health()`: `ready` is false when any of the others says so, and `reason` says why.
export interface CollabHealth {
  ready: boolean;
  /// Why it should not be sent traffic now (the first of: shutting down, leases cannot be
  /// renewed, the store does not answer), or null when ready.
  reason: string | null;
  /// True once `close` was called.
  draining: boolean;
  /// False while document lease renewals or this node's heartbeats fail (a shared store such
  /// as Redis cannot be reached); always true for a store without leases.
  leases: boolean;
  /// Whether the store answered a ping; null when it was not asked (it has no `ping`, or one
  /// of the checks above already failed).
  store: boolean | null;
}

/// The counts of `Collab.stats()`: `rooms`' documents and failures, and `editors`.
export function statsOf(rooms: Rooms, editors: number): CollabStats {
  return {
    documents: rooms.size,
    editors,
    quarantined: rooms.quarantinedCount,
    corruptLoads: rooms.corruptLoads,
    roomFailures: rooms.roomFailures,
  };
}

/// The answer of `Collab.health()`. Pings `store` only when neither draining nor failing leases
/// already stop it: a readiness probe then costs the store nothing while it cannot help.
export async function healthOf(
  rooms: Rooms,
  store: Store,
  draining: boolean,
): Promise<CollabHealth> {
  const leases = rooms.leasesHealthy;
  let answered: boolean | null = null;
  let reason: string | null = null;
  if (draining) reason = 'shutting down';
  else if (!leases) reason = 'document leases cannot be renewed';
  else if (isPingable(store)) {
    try {
      await store.ping();
      answered = true;
    } catch {
      answered = false;
      reason = 'the store does not answer';
    }
  }
  return { ready: reason === null, reason, draining, leases, store: answered };
}

/// Stores that can be asked whether they answer (Redis, files).
function isPingable(store: Store): store is Store & { ping(): Promise<void> } {
  return typeof (store as { ping?: unknown }).ping === 'function';
}
