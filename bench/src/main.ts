/**
 * @module main
 * `npm run bench [-- SUITE ...] [options]`: runs the named bench suites (all of them when none is named)
 * and prints their tables to stdout, progress to stderr. `--help` lists the suites and their options.
 *
 * The registry below maps suite names to their modules, loaded only when used or listed. To add a
 * suite, write a module that exports a {@link BenchSuite} and add one line here.
 */
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { STD_IO, UsageError, type BenchIo, type BenchSuite, type SuiteOption } from './suite.js';

export const SUITES: Readonly<Record<string, () => Promise<BenchSuite>>> = {
  model: async () => (await import('./model-bench.js')).modelSuite,
  artifacts: async () => (await import('./artifacts-bench.js')).artifactsSuite,
  documents: async () => (await import('./documents-bench.js')).documentsSuite,
  'documents-scale': async () => (await import('./documents-scale-bench.js')).documentsScaleSuite,
  pipeline: async () => (await import('./pipeline-bench.js')).pipelineSuite,
  replay: async () => (await import('./replay-bench.js')).replaySuite,
  batch: async () => (await import('./batch-bench.js')).batchSuite,
  retrieval: async () => (await import('./retrieval-bench.js')).retrievalSuite,
  encoder: async () => (await import('./encoder-bench.js')).encoderSuite,
  recovery: async () => (await import('./recovery-bench.js')).recoverySuite,
  fairness: async () => (await import('./fairness-bench.js')).fairnessSuite,
  bodies: async () => (await import('./bodies-bench.js')).bodiesSuite,
};

const HELP_OPTION: SuiteOption = { type: 'boolean', description: 'list the suites and their options' };

function optionLine(name: string, o: SuiteOption): string {
  const flag = o.type === 'boolean' ? `--${name}` : `--${name} ${o.valueName ?? 'VALUE'}`;
  const dflt = o.defaultText === undefined ? '' : ` (default: ${o.defaultText})`;
  return `    ${flag.padEnd(30)} ${o.description}${dflt}`;
}

export async function usage(): Promise<string> {
  const lines = ['usage: npm run bench -- [SUITE ...] [options]   (no SUITE: every suite)', '', 'suites:'];
  for (const [name, load] of Object.entries(SUITES)) {
    const suite = await load();
    lines.push(`  ${name}: ${suite.summary}`);
    for (const [opt, o] of Object.entries(suite.options)) lines.push(optionLine(opt, o));
  }
  lines.push('', 'Tables go to stdout (Markdown), progress to stderr.');
  return lines.join('\n');
}

/** Runs the command line `argv` (without node and script); returns the exit code. */
export async function main(argv: readonly string[], io: BenchIo = STD_IO): Promise<number> {
  try {
    // suites are the words before the first option; after it every word is an option or its value
    // (`--recovery-scenarios encoder` names a scenario, not the encoder suite)
    const firstOption = argv.findIndex((a) => a.startsWith('-'));
    const leading = argv.slice(0, firstOption < 0 ? argv.length : firstOption);
    const names = leading.filter((a) => a in SUITES);
    const stray = leading.filter((a) => !(a in SUITES));
    if (stray.length > 0) throw new UsageError(`unknown suite "${stray[0]}" (known: ${Object.keys(SUITES).join(', ')})`);
    const selected = await Promise.all((names.length > 0 ? names : Object.keys(SUITES)).map((n) => (SUITES[n] as () => Promise<BenchSuite>)()));
    const options: Record<string, SuiteOption> = { help: HELP_OPTION };
    for (const s of selected) Object.assign(options, s.options);
    let values: Record<string, string | boolean | undefined>;
    try {
      values = parseArgs({
        args: argv.slice(leading.length),
        options: Object.fromEntries(Object.entries(options).map(([k, o]) => [k, { type: o.type }])),
        allowPositionals: false,
        strict: true,
      }).values as Record<string, string | boolean | undefined>;
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    if (values['help'] === true) {
      io.out(await usage());
      return 0;
    }
    for (const s of selected) {
      io.log(`== bench suite ${s.name}`);
      await s.run(values, io);
    }
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      io.log(`bench: ${err.message}\n${await usage()}`);
      return 2;
    }
    throw err;
  }
}

// Run when executed as a script (bench/dist/main.js), not when imported by tests.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv.slice(2));
}
