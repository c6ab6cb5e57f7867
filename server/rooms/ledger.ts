/// How many editors' last versions a snapshot keeps (`Snapshot.clients`): the most recent. An
/// editor away while more than this many others edited the document is not told whether its
/// lost batch landed (it re-applies it).
export const ledgerSize = 1000;

/// Per client id, the version after its last published batch (see `Snapshot.clients`): what
/// tells a reconnecting editor whether its unacknowledged batch landed. Not the authority's
/// `lastEnd`, which also counts batches applied but not yet durable (and is rewound with
/// them): a client is told only of what the document it is sent holds.
export class ClientLedger {
  private readonly ends: Map<string, number>;

  /// Starts from the ledger as the stored document left it (snapshot and journal).
  constructor(initial?: ReadonlyMap<string, number>) {
    this.ends = new Map(initial ?? []);
  }

  /// The version after `clientID`'s last published batch, if it is remembered.
  get(clientID: string): number | undefined {
    return this.ends.get(clientID);
  }

  /// Records a published batch of `clientID` ending at `version`. Kept under twice
  /// `ledgerSize`, trimmed to the most recent.
  set(clientID: string, version: number): void {
    this.ends.set(clientID, version);
    if (this.ends.size > 2 * ledgerSize) this.trim();
  }

  /// The `ledgerSize` most recent entries, for a snapshot.
  recent(): Record<string, number> {
    if (this.ends.size > ledgerSize) this.trim();
    return Object.fromEntries(this.ends);
  }

  /// Keeps the `ledgerSize` clients whose last batch is the most recent.
  private trim(): void {
    const kept = [...this.ends].sort((a, b) => b[1] - a[1]).slice(0, ledgerSize);
    this.ends.clear();
    for (const [clientID, end] of kept) this.ends.set(clientID, end);
  }
}
