// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests: it
// throws on the first line that does not match the grammar, so a test that parses a scrape
// proves every line is valid, not just the lines it looks at.

/// One sample line: `name{labels} value`.
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/// A metric family: its TYPE, HELP and samples.
export interface Family {
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string | null;
  samples: Sample[];
}

const metricName = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const helpLine = new RegExp(`^# HELP (${metricName}) (.*)$`);
const typeLine = new RegExp(`^# TYPE (${metricName}) (counter|gauge|histogram|summary|untyped)$`);
const sampleLine = new RegExp(`^(${metricName})(\\{[^}]*\\})? (\\S+)( -?[0-9]+)?$`);
const labelPair = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/;
// Values are Go ParseFloat syntax, which reads Inf and NaN in any case (prom-client writes Nan).
const floatValue =
  /^(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?|[+-]?inf(?:inity)?|nan)$/i;

/// Parses `text` into families keyed by name. Throws an Error naming the line on any syntax
/// error, a sample before its family's TYPE, a duplicate TYPE or HELP, a sample name that does
/// not belong to its family (histograms allow `_bucket`, `_sum`, `_count`), a histogram whose
/// buckets are not cumulative or lack `+Inf`, or a missing final newline.
export function parsePrometheusText(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  const families = new Map<string, Family>();
  const lines = text.slice(0, -1).split('\n');
  lines.forEach((line, index) => {
    const where = `line ${index + 1}: ${JSON.stringify(line)}`;
    if (line === '') return;
    let match: RegExpExecArray | null;
    if ((match = helpLine.exec(line)) !== null) {
      const family = familyOf(families, match[1]);
      if (family.help !== null) throw new Error(`duplicate HELP, ${where}`);
      family.help = match[2];
      return;
    }
    if ((match = typeLine.exec(line)) !== null) {
      if (families.get(match[1])?.samples.length) throw new Error(`TYPE after samples, ${where}`);
      const family = familyOf(families, match[1]);
      if (family.type !== 'untyped') throw new Error(`duplicate TYPE, ${where}`);
      family.type = match[2] as Family['type'];
      return;
    }
    if (line.startsWith('#')) {
      if (line.startsWith('# HELP') || line.startsWith('# TYPE')) throw new Error(where);
      return; // a plain comment
    }
    if ((match = sampleLine.exec(line)) === null) throw new Error(`bad sample, ${where}`);
    const [, name, labelText, valueText] = match;
    if (!floatValue.test(valueText)) throw new Error(`bad value, ${where}`);
    const family = families.get(name) ?? families.get(name.replace(/_(bucket|sum|count)$/, ''));
    if (family === undefined) throw new Error(`sample without TYPE, ${where}`);
    const suffixed = name !== familyName(families, family);
    if (suffixed && family.type !== 'histogram' && family.type !== 'summary') {
      throw new Error(`suffix on a ${family.type}, ${where}`);
    }
    family.samples.push({
      name,
      labels: labelText === undefined ? {} : parseLabels(labelText.slice(1, -1), where),
      value: parseValue(valueText),
    });
  });
  for (const [name, family] of families) {
    if (family.type === 'histogram') checkHistogram(name, family);
  }
  return families;
}

/// The value of the one sample of `families` named `name` with exactly `labels`; throws when
/// there is none or more than one.
export function sampleValue(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number {
  const found: number[] = [];
  for (const family of families.values()) {
    for (const sample of family.samples) {
      if (sample.name === name && sameLabels(sample.labels, labels)) found.push(sample.value);
    }
  }
  if (found.length !== 1) {
    throw new Error(`${found.length} samples ${name}${JSON.stringify(labels)}`);
  }
  return found[0];
}

function familyOf(families: Map<string, Family>, name: string): Family {
  let family = families.get(name);
  if (family === undefined) {
    family = { type: 'untyped', help: null, samples: [] };
    families.set(name, family);
  }
  return family;
}

function familyName(families: Map<string, Family>, family: Family): string {
  for (const [name, candidate] of families) if (candidate === family) return name;
  throw new Error('unreachable: family not in map');
}

function parseLabels(text: string, where: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let rest = text;
  while (rest !== '') {
    const match = labelPair.exec(rest);
    if (match === null) throw new Error(`bad labels, ${where}`);
    if (match[1] in labels) throw new Error(`duplicate label, ${where}`);
    labels[match[1]] = match[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    rest = rest.slice(match[0].length);
    if (match[3] === '' && rest !== '') throw new Error(`bad labels, ${where}`);
  }
  return labels;
}

function parseValue(text: string): number {
  const lower = text.toLowerCase();
  if (lower === 'nan') return NaN;
  if (lower.includes('inf')) return lower.startsWith('-') ? -Infinity : Infinity;
  return Number(text);
}

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key]);
}

function checkHistogram(name: string, family: Family): void {
  const buckets = family.samples.filter((s) => s.name === `${name}_bucket`);
  // Buckets of one label set are consecutive and cumulative, ending at +Inf == _count.
  let previous = -1;
  let sawInf = false;
  for (const bucket of buckets) {
    if (!('le' in bucket.labels)) throw new Error(`${name}: bucket without le`);
    if (bucket.value < previous) throw new Error(`${name}: buckets not cumulative`);
    previous = bucket.value;
    if (bucket.labels.le === '+Inf') {
      const { le: _le, ...rest } = bucket.labels;
      const count = family.samples.find(
        (s) => s.name === `${name}_count` && sameLabels(s.labels, rest),
      );
      if (count === undefined || count.value !== bucket.value) {
        throw new Error(`${name}: +Inf bucket differs from _count`);
      }
      sawInf = true;
      previous = -1;
    }
  }
  if (buckets.length > 0 && !sawInf) throw new Error(`${name}: no +Inf bucket`);
}
