/**
 * The repository speaks of the software, not of how it was built. Every tracked text file (code,
 * documents, tests, program output, configuration) and every tracked path is searched for words about
 * the making of the project rather than about what it does: numbered work sessions and sessions named
 * by their order (this one, the next, the previous, the last), issue numbers (the word issue before a
 * number, a hash before a number),
 * helpers and subagents,
 * calls to and time on a remote GPU machine, and file names that carry such a session number
 * ("s15_call.sh", "logs/s16/"). Each offending line is reported as file:line with the words that matched.
 *
 * Legitimate uses of the same words stay allowed: an onnxruntime InferenceSession, an HTTP or inspector
 * session, an AWS session token, a CUDA device, a test helper. History belongs in CHANGELOG.md, written in
 * the software's terms (versions and dates), and in git.
 *
 * Skipped: package-lock.json (generated), binary files (a NUL byte in the first 8 KiB) and this file,
 * which names the words it looks for (its examples above check the patterns instead).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = resolve(fileURLToPath(new URL('../../../', import.meta.url)));
const SELF = 'test/src/repository/process-words.test.ts';

/** What a line may not say, each with the reason printed beside an offending line. */
export const PROCESS_WORDS: ReadonlyArray<readonly [reason: string, pattern: RegExp]> = [
  ['a work session', /\b[Ss]essions? [0-9]+|\b(this|next|previous|last) session\b|\bwork sessions?\b/],
  ['an issue number', /\b[Ii]ssues?[ -]#?[0-9]+\b|(^|[\s([])#[0-9]{1,5}\b(?![0-9a-fA-F;%])/],
  ['a remote GPU call', /\bdevice (calls?|time|budget|machine|tool|copy)\b|\bremote GPU\b|\bGPU calls?\b/],
  [
    'a helper or the team',
    /\blead\s+engineer\b|\bsub-?agents?\b|\bhelpers? h[0-9]+\b|\b(gateway|training|docs|recovery) helper\b|\boverwrote\b.*\bby mistake\b/,
  ],
  ['a file named after a work session', /\bs[0-9]{1,2}(_(call|diag|summary|golden)\b|-step[0-9]|call[0-9])|\blogs\/s[0-9]+\b|\/h[0-9]{1,2}[-/]/],
];

/** The reasons a line gives offence (empty when it gives none). */
export function processWords(line: string): string[] {
  const found: string[] = [];
  for (const [reason, pattern] of PROCESS_WORDS) {
    const m = pattern.exec(line);
    if (m !== null) found.push(`${reason} ("${m[0]}")`);
  }
  return found;
}

function trackedFiles(): string[] | null {
  const r = spawnSync('git', ['ls-files', '-z'], { cwd: REPO, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error !== undefined || r.status !== 0) return null;
  return r.stdout.split('\0').filter((f) => f !== '');
}

const files = trackedFiles();
const notAGitTree = files === null ? 'not a git work tree (git ls-files failed)' : false;

// The examples are assembled from pieces so that this file does not itself contain what it looks for.
const says = (...parts: string[]): string => parts.join(' ');

test('the patterns catch the words about how the project was made', () => {
  const offending = [
    says('served since', 'session', '14'),
    says('as the next', 'session', 'should do'),
    says('Goals', '(issue', '14 item 3):'),
    says('see', '#' + '30'),
    says('two', 'device', 'calls on a warm H100'),
    says('the', 'device', 'budget ran out'),
    says('a', 'sub' + 'agent', 'wrote it'),
    says('the gateway', 'helper', 'overwrote this file by', 'mistake'),
    says('bash training/' + 's15' + '_call.sh 1'),
    says('training/logs/' + 's16' + '/retrieval.log'),
    says('asked by the', 'lead', 'engineer'),
  ];
  for (const line of offending) assert.notDeepEqual(processWords(line), [], line);
});

test("the patterns leave the software's own words alone", () => {
  const fine = [
    'const session = await ort.InferenceSession.create(bytes);',
    'one session per distinct K×N weight, M symbolic',
    'AWS_SESSION_TOKEN: undefined,',
    "const session = new Session(); await session.post('Profiler.enable');",
    'the CUDA device the model runs on (--device cuda)',
    'Test helper for the GraphOps emitters',
    'an issue with the request body is reported as 400',
    'color: #333; margin: 0 0 4px',
    'step 1334 (105.9M training tokens) is the served checkpoint',
    'shape [48, 4] at layer 5',
  ];
  for (const line of fine) assert.deepEqual(processWords(line), [], line);
});

test('no tracked file or path speaks of how the project was made', { skip: notAGitTree }, () => {
  const problems: string[] = [];
  for (const file of files ?? []) {
    if (file === 'package-lock.json' || file.endsWith('/package-lock.json')) continue;
    if (file === SELF) continue; // this file names the words it looks for
    for (const why of processWords(file)) problems.push(`${file}: the path names ${why}`);
    let bytes: Buffer;
    try {
      bytes = readFileSync(join(REPO, file));
    } catch {
      continue; // deleted in the work tree, not yet committed
    }
    if (bytes.subarray(0, 8192).includes(0)) continue;
    const lines = bytes.toString('utf8').split('\n');
    lines.forEach((line, i) => {
      for (const why of processWords(line)) problems.push(`${file}:${i + 1}: ${why}`);
    });
  }
  assert.deepEqual(problems, [], `${problems.length} lines speak of how the project was made rather than of the software:\n${problems.join('\n')}`);
});
