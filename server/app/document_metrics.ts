import { Counter, Gauge, type Registry } from 'prom-client';
import type { Collab } from '../index.js';

/// Adds the health of the documents to `registry`, read from `collab.stats()` when scraped:
/// - `scriptorium_documents_quarantined`: documents refused as `corrupt` right now;
/// - `scriptorium_document_corrupt_loads_total`: loads that found damaged stored data;
/// - `scriptorium_room_failures_total`: rooms closed because serving them threw.
/// An operator alerts on the last two: each is a document its editors cannot use.
export function registerDocumentMetrics(
  registry: Registry,
  collab: Collab,
  prefix = 'scriptorium_',
): void {
  new Gauge({
    name: `${prefix}documents_quarantined`,
    help: 'Documents whose stored data cannot be loaded, refused as corrupt',
    registers: [registry],
    collect() {
      this.set(collab.stats().quarantined);
    },
  });
  new Counter({
    name: `${prefix}document_corrupt_loads_total`,
    help: 'Document loads that found stored data which cannot be parsed or applied',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(collab.stats().corruptLoads);
    },
  });
  new Counter({
    name: `${prefix}room_failures_total`,
    help: 'Rooms closed because serving them threw; their editors reloaded from the store',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(collab.stats().roomFailures);
    },
  });
}
