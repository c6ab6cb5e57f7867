import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  capacityOf,
  curveOf,
  curveSvg,
  curveTable,
  type PeerRun,
  type PeerServer,
} from '../../bench/peers/curve.js';

function run(
  server: PeerServer,
  editors: number,
  round: number,
  cpuUsPerEdit: number,
  p99Ms: number,
  converged = true,
): PeerRun {
  return {
    server,
    editors,
    round,
    editsPerSec: editors * 5,
    cpuUsPerEdit,
    p50Ms: p99Ms / 4,
    p99Ms,
    converged,
  };
}

describe('bench:peers --curve', () => {
  const runs = [
    run('scriptorium', 10, 1, 400, 5),
    run('hocuspocus', 10, 1, 800, 10),
    run('scriptorium', 10, 2, 600, 7),
    run('hocuspocus', 10, 2, 600, 12),
    run('scriptorium', 60, 1, 300, 40),
    run('hocuspocus', 60, 1, 900, 150),
    run('scriptorium', 60, 2, 300, 60),
    run('hocuspocus', 60, 2, 900, 170),
    run('scriptorium', 200, 1, 250, 300),
    run('hocuspocus', 200, 1, 1000, 900),
    run('scriptorium', 200, 2, 250, 90),
    run('hocuspocus', 200, 2, 1000, 800),
  ];

  it('takes medians over rounds and the median of the per-round CPU ratios', () => {
    const curve = curveOf(runs, [10, 60, 200]);
    assert.equal(curve.points.scriptorium[0]!.cpuUsPerEdit, 500);
    assert.equal(curve.points.hocuspocus[0]!.p99Ms, 11);
    // Round 1: 400/800 = 0.5, round 2: 600/600 = 1.
    assert.equal(curve.cpuRatios[0], 0.75);
    assert.ok(Math.abs(curve.cpuRatios[1]! - 1 / 3) < 1e-9);
  });

  it('counts capacity up to the first level over the p99 bound or not converged', () => {
    const curve = curveOf(runs, [10, 60, 200]);
    // 200 editors: median p99 of 300 and 90 is 195 ms, over the bound.
    assert.equal(capacityOf(curve.points.scriptorium), 60);
    assert.equal(capacityOf(curve.points.hocuspocus), 10);
    const diverged = curveOf(
      [run('scriptorium', 10, 1, 1, 1, false), run('scriptorium', 60, 1, 1, 1)],
      [10, 60],
    );
    assert.equal(capacityOf(diverged.points.scriptorium), null);
  });

  it('prints a row per level and the capacities', () => {
    const lines = curveTable(curveOf(runs, [10, 60, 200]));
    assert.equal(lines.filter((line) => /^\| \d+ \|/.test(line)).length, 3);
    assert.match(lines.join('\n'), /\| 60 \| 300 \/ 900 µs \(0\.33×\)/);
    assert.match(lines.at(-1)!, /Scriptorium 60, Hocuspocus 10\.$/);
  });

  it('draws four panels with a line per server and every point', () => {
    const svg = curveSvg(curveOf(runs, [10, 60, 200]), 'two rounds <test>');
    assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    assert.equal(svg.match(/<polyline /g)?.length, 8);
    assert.equal(svg.match(/<circle /g)?.length, 4 * 2 * 3);
    assert.ok(svg.includes('two rounds &#60;test&#62;'));
    assert.ok(svg.includes('Scriptorium 60, Hocuspocus 10 editors'));
  });
});
