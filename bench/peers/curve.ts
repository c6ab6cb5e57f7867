import { fixed, median } from '../measured_run.js';

// `bench:peers -- --curve 10,30,60,...`: the side-by-side comparison at every level, as a table
// and as an SVG of four panels (server CPU per edit, client p50, client p99, confirmed edits/s
// against editors on one document), plus each server's capacity: the most editors on one
// document it held at a client p99 under `capacityP99Ms` among the levels run.

export type PeerServer = 'scriptorium' | 'hocuspocus';

/// One run of one server at one level, as `bench/peers.ts` measures it.
export interface PeerRun {
  server: PeerServer;
  editors: number;
  round: number;
  editsPerSec: number;
  cpuUsPerEdit: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
  converged: boolean;
}

/// The client p99 under which a level counts as held.
export const capacityP99Ms = 100;

/// Medians over the rounds of one server at one level.
export interface CurvePoint {
  editors: number;
  cpuUsPerEdit: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
  editsPerSec: number | null;
  /// Every round converged.
  converged: boolean;
}

export interface Curve {
  levels: number[];
  points: Record<PeerServer, CurvePoint[]>;
  /// Per level, the median over rounds of Scriptorium's CPU per edit over Hocuspocus's.
  cpuRatios: (number | null)[];
}

export function curveOf(runs: readonly PeerRun[], levels: readonly number[]): Curve {
  const pointOf = (server: PeerServer, editors: number): CurvePoint => {
    const of = runs.filter((run) => run.server === server && run.editors === editors);
    return {
      editors,
      cpuUsPerEdit: median(of.map((run) => run.cpuUsPerEdit)),
      p50Ms: median(of.map((run) => run.p50Ms)),
      p99Ms: median(of.map((run) => run.p99Ms)),
      editsPerSec: median(of.map((run) => run.editsPerSec)),
      converged: of.length > 0 && of.every((run) => run.converged),
    };
  };
  const cpuRatios = levels.map((editors) => {
    const ours = runs.filter((run) => run.server === 'scriptorium' && run.editors === editors);
    const theirs = runs.filter((run) => run.server === 'hocuspocus' && run.editors === editors);
    return median(
      ours.map((run) => {
        const peer = theirs.find((other) => other.round === run.round);
        return run.cpuUsPerEdit !== null && peer?.cpuUsPerEdit
          ? run.cpuUsPerEdit / peer.cpuUsPerEdit
          : null;
      }),
    );
  });
  return {
    levels: [...levels],
    points: {
      scriptorium: levels.map((editors) => pointOf('scriptorium', editors)),
      hocuspocus: levels.map((editors) => pointOf('hocuspocus', editors)),
    },
    cpuRatios,
  };
}

/// The most editors among the levels at which `points` held a median client p99 under
/// `capacityP99Ms` and converged, every smaller level held too; null when the first did not.
export function capacityOf(points: readonly CurvePoint[]): number | null {
  let held: number | null = null;
  for (const point of points) {
    if (!point.converged || point.p99Ms === null || point.p99Ms >= capacityP99Ms) break;
    held = point.editors;
  }
  return held;
}

export function curveTable(curve: Curve): string[] {
  const ratio = (ours: number | null, theirs: number | null) =>
    ours !== null && theirs ? `${fixed(ours / theirs, 2)}×` : '–';
  const lines = [
    '| Editors | CPU/edit S / H (ratio) | Client p50 S / H | Client p99 S / H (ratio) | Edits/s S / H |',
    '| ---: | ---: | ---: | ---: | ---: |',
  ];
  curve.levels.forEach((editors, i) => {
    const s = curve.points.scriptorium[i]!;
    const h = curve.points.hocuspocus[i]!;
    lines.push(
      `| ${editors} | ${fixed(s.cpuUsPerEdit, 0)} / ${fixed(h.cpuUsPerEdit, 0)} µs (${
        curve.cpuRatios[i] === null ? '–' : `${fixed(curve.cpuRatios[i]!, 2)}×`
      }) | ${fixed(s.p50Ms, 1)} / ${fixed(h.p50Ms, 1)} ms | ${fixed(s.p99Ms, 1)} / ${fixed(
        h.p99Ms,
        1,
      )} ms (${ratio(s.p99Ms, h.p99Ms)}) | ${fixed(s.editsPerSec, 0)} / ${fixed(
        h.editsPerSec,
        0,
      )} |`,
    );
  });
  const capacity = (server: PeerServer) => {
    const editors = capacityOf(curve.points[server]);
    return editors === null ? `under ${curve.levels[0]}` : String(editors);
  };
  lines.push(
    '',
    `Capacity (most editors on one document at client p99 < ${capacityP99Ms} ms, among the levels run): Scriptorium ${capacity(
      'scriptorium',
    )}, Hocuspocus ${capacity('hocuspocus')}.`,
  );
  return lines;
}

interface Panel {
  title: string;
  unit: string;
  pick: (point: CurvePoint) => number | null;
}

const panels: Panel[] = [
  { title: 'Server CPU per edit', unit: 'µs', pick: (point) => point.cpuUsPerEdit },
  { title: 'Client p50', unit: 'ms', pick: (point) => point.p50Ms },
  { title: 'Client p99', unit: 'ms', pick: (point) => point.p99Ms },
  { title: 'Confirmed edits/s', unit: '/s', pick: (point) => point.editsPerSec },
];

const colours: Record<PeerServer, string> = { scriptorium: '#1f77b4', hocuspocus: '#d62728' };
const names: Record<PeerServer, string> = { scriptorium: 'Scriptorium', hocuspocus: 'Hocuspocus' };

/// The curve as a standalone SVG: four panels side by side, editors on a log axis, one line
/// per server, every point labelled with its value.
export function curveSvg(curve: Curve, caption: string): string {
  const width = 300;
  const height = 220;
  const pad = { left: 52, right: 14, top: 34, bottom: 40 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const minX = Math.log(Math.min(...curve.levels));
  const maxX = Math.log(Math.max(...curve.levels));
  const x = (editors: number) =>
    pad.left + (maxX === minX ? plotW / 2 : ((Math.log(editors) - minX) / (maxX - minX)) * plotW);
  const parts: string[] = [];
  panels.forEach((panel, index) => {
    const values = (['scriptorium', 'hocuspocus'] as const).flatMap((server) =>
      curve.points[server].map(panel.pick).filter((value): value is number => value !== null),
    );
    const top = niceCeiling(Math.max(1e-9, ...values));
    const y = (value: number) => pad.top + plotH - (value / top) * plotH;
    const g: string[] = [`<g transform="translate(${index * width},0)">`];
    g.push(
      `<text x="${pad.left}" y="18" font-weight="bold">${panel.title} (${panel.unit})</text>`,
      `<line x1="${pad.left}" y1="${pad.top + plotH}" x2="${pad.left + plotW}" y2="${pad.top + plotH}" stroke="#444"/>`,
      `<line x1="${pad.left}" y1="${pad.top}" x2="${pad.left}" y2="${pad.top + plotH}" stroke="#444"/>`,
      `<text x="${pad.left - 6}" y="${pad.top + 4}" text-anchor="end">${formatValue(top)}</text>`,
      `<text x="${pad.left - 6}" y="${pad.top + plotH + 4}" text-anchor="end">0</text>`,
      `<text x="${pad.left + plotW / 2}" y="${height - 6}" text-anchor="middle">editors on one document</text>`,
    );
    for (const editors of curve.levels) {
      g.push(
        `<text x="${x(editors)}" y="${pad.top + plotH + 16}" text-anchor="middle">${editors}</text>`,
      );
    }
    for (const server of ['scriptorium', 'hocuspocus'] as const) {
      const points = curve.points[server]
        .map((point) => ({ editors: point.editors, value: panel.pick(point) }))
        .filter((point): point is { editors: number; value: number } => point.value !== null);
      if (points.length === 0) continue;
      const path = points.map((point) => `${x(point.editors)},${y(point.value)}`).join(' ');
      g.push(
        `<polyline points="${path}" fill="none" stroke="${colours[server]}" stroke-width="2"/>`,
      );
      for (const point of points) {
        g.push(
          `<circle cx="${x(point.editors)}" cy="${y(point.value)}" r="3" fill="${colours[server]}"/>`,
          `<text x="${x(point.editors) + 4}" y="${y(point.value) - 5}" fill="${colours[server]}" font-size="9">${formatValue(point.value)}</text>`,
        );
      }
    }
    g.push('</g>');
    parts.push(g.join(''));
  });
  const legend = (['scriptorium', 'hocuspocus'] as const)
    .map(
      (server, i) =>
        `<rect x="${12 + i * 130}" y="${height + 6}" width="12" height="12" fill="${colours[server]}"/><text x="${30 + i * 130}" y="${height + 16}">${names[server]}</text>`,
    )
    .join('');
  const total = panels.length * width;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${total}" height="${height + 44}" viewBox="0 0 ${total} ${height + 44}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...parts,
    legend,
    `<text x="300" y="${height + 16}">${escapeXml(caption)}</text>`,
    `<text x="12" y="${height + 36}">Capacity at client p99 &lt; ${capacityP99Ms} ms: Scriptorium ${capacityOf(curve.points.scriptorium) ?? '–'}, Hocuspocus ${capacityOf(curve.points.hocuspocus) ?? '–'} editors (among the levels run)</text>`,
    '</svg>',
    '',
  ].join('\n');
}

/// 1, 2 or 5 times a power of ten, at least `value`.
function niceCeiling(value: number): number {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function formatValue(value: number): string {
  if (value >= 100) return value.toFixed(0);
  if (value >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

function escapeXml(text: string): string {
  return text.replace(/[<>&"]/g, (c) => `&#${c.charCodeAt(0)};`);
}
