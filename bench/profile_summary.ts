import { readFileSync } from 'node:fs';

// `node dist/bench/profile_summary.js <file.cpuprofile> [top]`: a CPU profile (`node --cpu-prof`)
// summed by self time, per package (or our own folder) and per function, and by inclusive time
// per function (a function's own time and its callees', counted once per sample however often
// it recurses), as shares of the busy time (idle left out). What BENCHMARKS.md's profile tables
// are made from.

interface ProfileNode {
  id: number;
  children?: number[];
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const file = process.argv[2];
if (!file) {
  console.error('usage: node dist/bench/profile_summary.js <file.cpuprofile> [top]');
  process.exit(1);
}
const top = Number(process.argv[3] ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const selfTime = new Map<number, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const dt = profile.timeDeltas[i] ?? 0;
  selfTime.set(id, (selfTime.get(id) ?? 0) + dt);
  total += dt;
});

/// The package a frame belongs to: its node_modules package, `node:…`, our folder, or a V8
/// pseudo-frame such as `(garbage collector)`.
function packageOf(frame: ProfileNode['callFrame']): string {
  const url = frame.url;
  if (!url) return frame.functionName.startsWith('(') ? frame.functionName : '(native)';
  if (url.includes('node_modules/')) return url.split('node_modules/')[1]!.split('/')[0]!;
  if (url.startsWith('node:')) return url.split('/')[0]!;
  return url
    .replace(/^file:\/\/.*?\/dist\//, '')
    .split('/')
    .slice(0, 2)
    .join('/');
}

const frameName = (frame: ProfileNode['callFrame']): string =>
  `${frame.functionName || '(anonymous)'} ${frame.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*?\/dist\//, '')}:${frame.lineNumber}`;
const parentOf = new Map<number, number>();
for (const node of profile.nodes)
  for (const child of node.children ?? []) parentOf.set(child, node.id);

const perPackage = new Map<string, number>();
const perFunction = new Map<string, number>();
const perInclusive = new Map<string, number>();
let idle = 0;
for (const [id, time] of selfTime) {
  const frame = byId.get(id)!.callFrame;
  if (frame.functionName === '(idle)') {
    idle += time;
    continue;
  }
  const pkg = packageOf(frame);
  perPackage.set(pkg, (perPackage.get(pkg) ?? 0) + time);
  const name = frameName(frame);
  perFunction.set(name, (perFunction.get(name) ?? 0) + time);
  const onStack = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
    const caller = byId.get(at)!.callFrame;
    if (caller.functionName === '(root)') continue;
    onStack.add(frameName(caller));
  }
  for (const caller of onStack) perInclusive.set(caller, (perInclusive.get(caller) ?? 0) + time);
}
const busy = total - idle;
const show = (title: string, map: Map<string, number>) => {
  console.log(`\n| ${title} | share of busy CPU |\n| :--- | ---: |`);
  for (const [name, time] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`| ${name} | ${((100 * time) / busy).toFixed(1)}% |`);
  }
};
console.log(`profile ${(total / 1e6).toFixed(1)} s, busy ${(busy / 1e6).toFixed(2)} s of CPU`);
show('package', perPackage);
show('function (self)', perFunction);
show('function (inclusive)', perInclusive);
