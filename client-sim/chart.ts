import type { LevelResult } from './swarm.js';

interface Series {
  name: string;
  color: string;
  dashed: boolean;
  /// Plotted against the right axis (throughput) rather than the left (latency).
  right: boolean;
  points: { x: number; y: number }[];
}

const width = 760;
const height = 420;
const margin = { top: 48, right: 78, bottom: 92, left: 70 };

/// A hand-written SVG chart of latency and throughput against editors: server and client p90
/// and p99 on the left axis (ms), confirmed edits/s and the server's RPS on the right axis.
/// Levels without a value for a series are left out of that series. Returns the SVG text.
export function latencyChart(levels: readonly LevelResult[], title: string): string {
  const series: Series[] = [
    line('server p90', '#1f77b4', true, false, levels, (l) => l.steady.server?.p90Ms),
    line('server p99', '#1f77b4', false, false, levels, (l) => l.steady.server?.p99Ms),
    line('client p90', '#d62728', true, false, levels, (l) => l.steady.latency?.p90Ms),
    line('client p99', '#d62728', false, false, levels, (l) => l.steady.latency?.p99Ms),
    line('confirmed edits/s', '#2ca02c', false, true, levels, (l) => l.steady.confirmedPerSec),
    line('server RPS', '#9467bd', true, true, levels, (l) => l.steady.server?.acceptedPerSec),
  ].filter((s) => s.points.length > 0);
  const xs = levels.map((level) => level.editors);
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  const leftMax = niceMax(maxOf(series.filter((s) => !s.right)));
  const rightMax = niceMax(maxOf(series.filter((s) => s.right)));
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const sx = (x: number) =>
    margin.left + (xMax === xMin ? plotW / 2 : ((x - xMin) / (xMax - xMin)) * plotW);
  const sy = (y: number, right: boolean) =>
    margin.top + plotH - (y / (right ? rightMax : leftMax)) * plotH;

  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${escape(title)}</text>`,
  );
  // Grid and left-axis ticks.
  for (let i = 0; i <= 5; i++) {
    const value = (leftMax / 5) * i;
    const y = sy(value, false);
    parts.push(
      `<line x1="${margin.left}" y1="${y}" x2="${width - margin.right}" y2="${y}" stroke="#e5e5e5"/>`,
      `<text x="${margin.left - 8}" y="${y + 4}" text-anchor="end">${label(value)}</text>`,
      `<text x="${width - margin.right + 8}" y="${y + 4}">${label((rightMax / 5) * i)}</text>`,
    );
  }
  for (const x of xs) {
    parts.push(
      `<line x1="${sx(x)}" y1="${margin.top + plotH}" x2="${sx(x)}" y2="${margin.top + plotH + 5}" stroke="#333"/>`,
      `<text x="${sx(x)}" y="${margin.top + plotH + 18}" text-anchor="middle">${x}</text>`,
    );
  }
  parts.push(
    `<line x1="${margin.left}" y1="${margin.top}" x2="${margin.left}" y2="${margin.top + plotH}" stroke="#333"/>`,
    `<line x1="${width - margin.right}" y1="${margin.top}" x2="${width - margin.right}" y2="${margin.top + plotH}" stroke="#333"/>`,
    `<line x1="${margin.left}" y1="${margin.top + plotH}" x2="${width - margin.right}" y2="${margin.top + plotH}" stroke="#333"/>`,
    `<text x="${margin.left + plotW / 2}" y="${margin.top + plotH + 38}" text-anchor="middle">editors</text>`,
    `<text transform="translate(18 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">latency (ms)</text>`,
    `<text transform="translate(${width - 16} ${margin.top + plotH / 2}) rotate(90)" text-anchor="middle">edits or batches per second</text>`,
  );
  for (const s of series) {
    const path = s.points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y, s.right).toFixed(1)}`);
    parts.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="2"${
        s.dashed ? ' stroke-dasharray="6 4"' : ''
      } points="${path.join(' ')}"/>`,
    );
    for (const p of s.points) {
      parts.push(
        `<circle cx="${sx(p.x).toFixed(1)}" cy="${sy(p.y, s.right).toFixed(1)}" r="3" fill="${s.color}"><title>${escape(s.name)}: ${label(p.y)} at ${p.x} editors</title></circle>`,
      );
    }
  }
  // Legend, two rows under the axis label.
  series.forEach((s, i) => {
    const x = margin.left + (i % 3) * 210;
    const y = height - 30 + Math.floor(i / 3) * 16;
    parts.push(
      `<line x1="${x}" y1="${y - 4}" x2="${x + 24}" y2="${y - 4}" stroke="${s.color}" stroke-width="2"${
        s.dashed ? ' stroke-dasharray="6 4"' : ''
      }/>`,
      `<text x="${x + 30}" y="${y}">${escape(s.name)} (${s.right ? 'right' : 'left'})</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

function line(
  name: string,
  color: string,
  dashed: boolean,
  right: boolean,
  levels: readonly LevelResult[],
  pick: (level: LevelResult) => number | null | undefined,
): Series {
  const points: { x: number; y: number }[] = [];
  for (const level of levels) {
    const y = pick(level);
    if (typeof y === 'number' && Number.isFinite(y)) points.push({ x: level.editors, y });
  }
  return { name, color, dashed, right, points };
}

function maxOf(series: readonly Series[]): number {
  let max = 0;
  for (const s of series) for (const p of s.points) max = Math.max(max, p.y);
  return max;
}

/// The axis top: the next 1, 2 or 5 times a power of ten above `value`.
function niceMax(value: number): number {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function label(value: number): string {
  if (value === 0) return '0';
  if (value >= 100) return value.toFixed(0);
  if (value >= 10) return value.toFixed(1).replace(/\.0$/, '');
  return value.toFixed(2).replace(/0+$/, '').replace(/\.$/, '');
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
