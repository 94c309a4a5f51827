/**
 * @module testing/s3-server
 * Starts a real S3-compatible server (s3rver) for tests, in a child process of its own so that its
 * needs (`--openssl-legacy-provider` for ListObjectsV2 pagination) never depend on how the test
 * process was started. The child exits when the parent does (it watches its stdin pipe, which
 * closes when the parent dies, also on a crash or SIGKILL), and removes its data directory.
 *
 * s3rver accepts only the access key pair {@link S3RVER_CREDENTIALS}.
 */
import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** The one key pair s3rver accepts. */
export const S3RVER_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } as const;

export interface S3TestServer {
  /** e.g. 'http://127.0.0.1:41234' (use with forcePathStyle). */
  readonly endpoint: string;
  /** The first bucket created at start. */
  readonly bucket: string;
  /** Every bucket created at start. */
  readonly buckets: readonly string[];
  readonly credentials: typeof S3RVER_CREDENTIALS;
  /** Stops the server and waits for its process to exit (idempotent). */
  stop(): Promise<void>;
}

export interface StartS3ServerOptions {
  /** Buckets to create before the server listens. @defaultValue ['csa2-test'] */
  readonly buckets?: readonly string[];
  /** Limit on the server's start-up. @defaultValue 15000 */
  readonly startTimeoutMs?: number;
}

/** Last bytes of the child's stderr kept for error messages. */
const STDERR_TAIL_CHARS = 4000;

/**
 * Starts s3rver on 127.0.0.1 on an ephemeral port, with the buckets created.
 * @example
 * const server = await startS3Server();
 * after(() => server.stop());
 * const store = new S3ObjectStore({ bucket: server.bucket, endpoint: server.endpoint, forcePathStyle: true, credentials: server.credentials });
 */
export async function startS3Server(options: StartS3ServerOptions = {}): Promise<S3TestServer> {
  const buckets = [...(options.buckets ?? ['csa2-test'])];
  const [bucket] = buckets;
  if (bucket === undefined) throw new Error('startS3Server: give at least one bucket');
  const startTimeoutMs = options.startTimeoutMs ?? 15_000;
  const childScript = fileURLToPath(new URL('./s3rver-child.js', import.meta.url));
  const child = spawn(process.execPath, ['--openssl-legacy-provider', childScript, JSON.stringify(buckets)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    // Only the flag above: inherited NODE_OPTIONS (e.g. an inspector or a loader) must not leak in.
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  const stdin = child.stdin as Writable & { unref?: () => void };
  const stdout = child.stdout as Readable & { unref?: () => void };
  const stderr = child.stderr as Readable & { unref?: () => void };
  let stderrTail = '';
  stderr.setEncoding('utf8');
  stderr.on('data', (text: string) => {
    stderrTail = (stderrTail + text).slice(-STDERR_TAIL_CHARS);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) => {
      let stdoutText = '';
      const timer = setTimeout(() => reject(new Error(`s3rver did not start within ${startTimeoutMs} ms`)), startTimeoutMs);
      stdout.setEncoding('utf8');
      stdout.on('data', (text: string) => {
        stdoutText += text;
        const newline = stdoutText.indexOf('\n');
        if (newline < 0) return;
        clearTimeout(timer);
        const line = stdoutText.slice(0, newline);
        let parsed: unknown;
        try {
          parsed = JSON.parse(line);
        } catch {
          parsed = undefined;
        }
        if (typeof parsed === 'object' && parsed !== null && 'port' in parsed && typeof parsed.port === 'number') resolve(parsed.port);
        else reject(new Error(`s3rver child printed ${JSON.stringify(line)}, expected {"port":N}`));
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`s3rver child exited (code ${code}, signal ${signal}) before listening`));
      });
    });
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${stderrTail}`, { cause: err });
  }

  // The test process must be free to exit while the server runs; the child then sees its stdin
  // close and exits by itself.
  child.unref();
  stdin.unref?.();
  stdout.unref?.();
  stderr.unref?.();
  stdout.resume();

  let stopped: Promise<void> | undefined;
  // Say so when the server dies under the tests (s3rver crashes on some inputs, e.g. file names
  // over 255 bytes); otherwise every later test only reports ECONNREFUSED.
  child.once('exit', (code, signal) => {
    if (stopped !== undefined) return;
    process.stderr.write(`s3rver child (port ${port}) exited unexpectedly (code ${code}, signal ${signal}):\n${stderrTail}\n`);
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    bucket,
    buckets,
    credentials: S3RVER_CREDENTIALS,
    stop() {
      if (stopped === undefined) {
        stopped = (async () => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          stdin.end();
          const killTimer = setTimeout(() => child.kill('SIGKILL'), 3000);
          await exited;
          clearTimeout(killTimer);
        })();
      }
      return stopped;
    },
  };
}
