import { writeFile } from 'node:fs/promises';
import { latencyChart } from './chart.js';
import { OptionError, parseSimArgs, usage } from './options.js';
import { progressLine, runDescription, summaryTable, windowTable } from './report.js';
import { ServerUnavailableError } from './server_http.js';
import { runSwarm } from './swarm.js';

// The `npm run sim` entry point. Exit codes: 0 all converged, 1 the run could not be made (bad
// options, no server, editors that cannot connect), 2 a document diverged or none was compared.
async function main(): Promise<number> {
  let options;
  try {
    options = parseSimArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof OptionError) {
      process.stderr.write(`sim: ${err.message}\nRun with --help for the options.\n`);
      return 1;
    }
    throw err;
  }
  if (options.help) {
    process.stdout.write(usage);
    return 0;
  }
  const tty = process.stdout.isTTY === true;
  let result;
  try {
    result = await runSwarm(options, (progress) => {
      if (tty) process.stdout.write(`\r${progressLine(progress)}\x1b[K`);
    });
  } catch (err) {
    if (tty) process.stdout.write('\n');
    if (err instanceof ServerUnavailableError || err instanceof OptionError) {
      process.stderr.write(`sim: ${err.message}\n`);
      return 1;
    }
    process.stderr.write(`sim: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  if (tty) process.stdout.write('\n');
  for (const level of result.levels) {
    process.stdout.write(`\n${level.editors} editors, per window:\n\n${windowTable(level)}\n`);
  }
  process.stdout.write(`\n${summaryTable(result)}\n\n${runDescription(result)}\n`);
  if (options.jsonFile) await writeFile(options.jsonFile, JSON.stringify(result, null, 2) + '\n');
  if (options.svgFile) {
    const title = `Scriptorium: ${options.docs} document(s), ${options.ratePerSec} edits/s per editor, RTT ${options.rttMs} ms`;
    await writeFile(options.svgFile, latencyChart(result.levels, title));
  }
  for (const level of result.levels) {
    for (const failure of level.convergence.failures) {
      process.stderr.write(`sim: divergence: ${failure}\n`);
    }
    if (level.convergence.unchecked) {
      process.stderr.write(
        `sim: ${level.editors} editors: no document was compared with the server's (unchecked)\n`,
      );
    }
  }
  return result.converged ? 0 : 2;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `sim: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
