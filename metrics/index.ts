export { metricsDefaults, resolveMetricsConfig, type MetricsConfig } from './config.js';
export { type TopDocument } from './document_activity.js';
export { LatencyHistogram } from './histogram.js';
export {
  MetricsRecorder,
  type MetricsHooks,
  type MetricsLogger,
  type WindowListener,
} from './recorder.js';
export { type MetricsWindow } from './window.js';
export { createMetricsRegistry, type MetricsRegistryOptions } from './prometheus.js';
export { type Totals } from './totals.js';
export type { Registry } from 'prom-client';
