/**
 * @module testing/s3rver-child
 * The child-process side of testing/s3-server: runs one s3rver on 127.0.0.1 (an ephemeral port,
 * a fresh temporary directory, the buckets named in argv[2] as JSON) and prints
 * `{"port":N}` as one line on stdout once it listens. It exits, removing its directory, when its
 * stdin closes (the parent exited or called stop(), also when the parent was killed) or on
 * SIGTERM/SIGINT.
 *
 * Started with `--openssl-legacy-provider`: s3rver encrypts ListObjectsV2 continuation tokens
 * with DES, which OpenSSL 3 only offers through its legacy provider.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The part of s3rver's (untyped, CommonJS) API used here. */
interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverConstructor = new (options: {
  port: number;
  address: string;
  directory: string;
  silent: boolean;
  configureBuckets: { name: string }[];
}) => S3rverInstance;

const require = createRequire(import.meta.url);
const S3rver = require('s3rver') as S3rverConstructor;

const bucketNames: unknown = JSON.parse(process.argv[2] ?? '[]');
if (!Array.isArray(bucketNames) || !bucketNames.every((name) => typeof name === 'string')) {
  throw new Error(`s3rver-child: argv[2] must be a JSON array of bucket names, got ${process.argv[2]}`);
}
const directory = mkdtempSync(join(tmpdir(), 'csa2-s3rver-'));
const server = new S3rver({
  port: 0,
  address: '127.0.0.1',
  directory,
  silent: true,
  configureBuckets: (bucketNames as string[]).map((name) => ({ name })),
});

let stopping = false;
function shutdown(exitCode: number): void {
  if (stopping) return;
  stopping = true;
  // Do not wait for keep-alive sockets to drain: the tests are over.
  setTimeout(() => finish(exitCode), 200).unref();
  server.close().then(
    () => finish(exitCode),
    () => finish(exitCode),
  );
}
function finish(exitCode: number): void {
  rmSync(directory, { recursive: true, force: true });
  process.exit(exitCode);
}

process.stdin.on('end', () => shutdown(0));
process.stdin.on('close', () => shutdown(0));
process.stdin.on('error', () => shutdown(0));
process.stdin.resume();
// s3rver lets some I/O errors escape (e.g. ENAMETOOLONG from a write stream): report, clean up, exit.
process.on('uncaughtException', (err) => {
  process.stderr.write(`s3rver-child: uncaught exception: ${err.stack ?? err.message}\n`);
  finish(1);
});
process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));

try {
  const address = await server.run();
  process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);
} catch (err) {
  process.stderr.write(`s3rver-child: failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  rmSync(directory, { recursive: true, force: true });
  process.exit(1);
}
