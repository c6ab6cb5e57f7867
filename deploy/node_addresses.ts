import { lookup } from 'node:dns/promises';

// nginx resolves the nodes' host names once, when it reads its configuration, and routes to
// those addresses until it reads it again. A node whose address changes (every deploy of a
// Render private service; a compose node container recreated) would be unreachable through
// the gateway from then on, its documents failing over to the next node on the ring for good.
// The gateway therefore looks the names up itself, now and then, and has nginx read its
// configuration again (SIGHUP: new workers, open websockets kept on the old ones until they
// close) when an address changed. The configuration keeps the names, not the addresses: the
// consistent-hash ring is built from the names as written, so a node keeps its documents
// across a change of address.

/// The host names of `nodes` (`host:port` each), once each, skipping IP literals, which never
/// change.
export function hostNames(nodes: readonly string[]): string[] {
  const hosts = new Set<string>();
  for (const node of nodes) {
    const host = node.slice(0, node.lastIndexOf(':'));
    if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(host)) hosts.add(host);
  }
  return [...hosts];
}

/// How a watch reports.
export interface AddressWatchOptions {
  hosts: readonly string[];
  /// Between two rounds of look-ups.
  intervalMs: number;
  /// Hosts whose addresses are no longer those last reported (or those of the first round),
  /// once per round at most, and only after a round in which every host resolved: nginx
  /// refuses a configuration naming a host that does not resolve, so a reload then would keep
  /// the old routes, and the change would never be reported again.
  onChange: (changes: readonly { host: string; addresses: readonly string[] }[]) => void;
  /// A host's look-up failed after one that did not (a node being replaced may have no address
  /// for a moment; reported once until it resolves again): the last known addresses stay,
  /// nothing is reloaded until it resolves again.
  onError: (host: string, error: Error) => void;
}

/// Looks `hosts` up now and every `intervalMs`, reporting each change of a host's set of
/// addresses. Returns a function that stops the watch.
export function watchAddresses(options: AddressWatchOptions): () => void {
  const known = new Map<string, string>();
  /// Changes not reported yet (held while a host does not resolve), by host.
  const changed = new Map<string, readonly string[]>();
  const failing = new Set<string>();
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const round = async (): Promise<void> => {
    for (const host of options.hosts) {
      let addresses: string[];
      try {
        addresses = (await lookup(host, { all: true })).map((entry) => entry.address).sort();
      } catch (err) {
        if (!stopped && !failing.has(host)) options.onError(host, err as Error);
        failing.add(host);
        continue;
      }
      if (stopped) return;
      failing.delete(host);
      const key = addresses.join(',');
      const before = known.get(host);
      known.set(host, key);
      if (before !== undefined && before !== key) changed.set(host, addresses);
    }
    if (stopped) return;
    if (changed.size > 0 && failing.size === 0) {
      const changes = [...changed].map(([host, addresses]) => ({ host, addresses }));
      changed.clear();
      options.onChange(changes);
    }
    if (!stopped) timer = setTimeout(() => void round(), options.intervalMs);
  };
  void round();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}
