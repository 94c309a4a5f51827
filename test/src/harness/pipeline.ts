/**
 * @module harness/pipeline
 * The whole pipeline as real processes for cross-process tests: a private redis-server, a filesystem
 * object store in a temporary directory, and the gateway, encoder-worker and decoder-worker started
 * from their compiled entry points (`services/*\/dist/main.js`) exactly as a deployment runs them.
 * Processes can be killed (SIGKILL) and started again; every process's output is kept and printed
 * when a test fails (`dumpLogs`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { initModel } from '@csa2/core';
import { WORKER_MALLOC_ENV, freePort, startLocalRedis, type LocalRedis } from '@csa2/jobs';

/** CSA2_PIPELINE_NODE_ARGS: node options for every service process (e.g. --cpu-prof, which NODE_OPTIONS refuses). */
const SERVICE_NODE_ARGS = (process.env['CSA2_PIPELINE_NODE_ARGS'] ?? '').split(' ').filter((a) => a !== '');

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export type ServiceName = 'gateway' | 'encoder' | 'decoder';

const ENTRY: Record<ServiceName, string> = {
  gateway: 'services/gateway/dist/main.js',
  encoder: 'services/encoder-worker/dist/main.js',
  decoder: 'services/decoder-worker/dist/main.js',
};
const READY_TEXT: Record<ServiceName, string | null> = {
  gateway: null, // ready when /readyz answers 200
  encoder: 'encoder worker started',
  decoder: 'decoder worker started',
};

export const API_KEY = 'test-key-acme-0001';
export const OTHER_API_KEY = 'test-key-other-0002';

/**
 * A seeded tiny model (the v41-tiny config of csa2-core, byte-level vocabulary) with a longer
 * context, so documents of a few thousand tokens fit. Made once per test process.
 */
export async function seededTestModel(dir: string, maxSeqLen = 4096): Promise<string> {
  const config = JSON.parse(readFileSync(join(REPO_ROOT, 'packages/csa2-core/configs/v41-tiny.json'), 'utf8')) as Record<string, unknown>;
  const outDir = join(dir, 'model');
  await initModel({ ...config, max_seq_len: maxSeqLen }, { seed: 1, outDir });
  return outDir;
}

export class Pipeline {
  readonly procs = new Map<string, ChildProcess>();
  /** The HTTP port of each worker process (/healthz, /readyz, /metrics), by process id ('decoder#2'). */
  readonly httpPorts = new Map<string, number>();
  private readonly logs: string[] = [];
  private instance = 0;
  /** How long a started service may take to be ready (a large model's warm-up takes longer). */
  readyTimeoutMs = 60_000;

  private constructor(
    readonly dir: string,
    readonly redis: LocalRedis,
    readonly modelDir: string,
    readonly storeUrl: string,
    readonly port: number,
    readonly env: Record<string, string>,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Starts Redis and the given services (default: all three); resolves when each is ready. */
  static async start(
    opts: { modelDir?: string; env?: Record<string, string>; services?: readonly ServiceName[]; readyTimeoutMs?: number } = {},
  ): Promise<Pipeline> {
    const dir = mkdtempSync(join(tmpdir(), 'csa2-pipeline-'));
    const modelDir = opts.modelDir ?? (await seededTestModel(dir));
    const redis = await startLocalRedis({ dir });
    const port = await freePort();
    const storeUrl = pathToFileURL(join(dir, 'store')).href;
    const env: Record<string, string> = {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? dir,
      REDIS_URL: redis.url,
      CSA2_STORE_URL: storeUrl,
      CSA2_MODEL_DIR: modelDir,
      CSA2_MODEL_NAME: 'tiny',
      CSA2_API_KEYS: `${API_KEY}:acme,${OTHER_API_KEY}:other`,
      PORT: String(port),
      CSA2_LOG_LEVEL: 'info', // the workers announce readiness at info
      // fast failure detection: a killed worker's job is picked up again within seconds
      CSA2_LOCK_DURATION_MS: '3000',
      CSA2_STALLED_INTERVAL_MS: '1000',
      CSA2_SHUTDOWN_GRACE_MS: '5000',
      CSA2_JOB_POLL_MS: '500',
      CSA2_THREADS: '1',
      ...WORKER_MALLOC_ENV, // as the worker images run
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      ...opts.env,
    };
    const p = new Pipeline(dir, redis, modelDir, storeUrl, port, env);
    if (opts.readyTimeoutMs !== undefined) p.readyTimeoutMs = opts.readyTimeoutMs;
    try {
      await Promise.all((opts.services ?? ['gateway', 'encoder', 'decoder']).map((s) => p.startService(s)));
    } catch (err) {
      p.dumpLogs();
      await p.stop();
      throw err;
    }
    return p;
  }

  /** Starts one more process of a service (a restarted or an extra worker); resolves when ready. */
  async startService(name: ServiceName): Promise<ChildProcess> {
    const id = `${name}#${++this.instance}`;
    // each worker process serves its probes and metrics on a port of its own (several run on one host here)
    const env = name === 'gateway' ? this.env : { ...this.env, CSA2_WORKER_HTTP_PORT: String(await freePort()) };
    const child = spawn(process.execPath, [...SERVICE_NODE_ARGS, join(REPO_ROOT, ENTRY[name])], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.procs.set(id, child);
    if (name !== 'gateway') this.httpPorts.set(id, Number(env['CSA2_WORKER_HTTP_PORT']));
    // the gateway is ready when /readyz answers 200 (polled below), a worker when it logged READY_TEXT
    let ready = false;
    const onData = (d: Buffer) => {
      const text = d.toString();
      this.logs.push(
        ...text
          .split('\n')
          .filter((l) => l.length > 0)
          .map((l) => `[${id}] ${l}`),
      );
      if (this.logs.length > 4000) this.logs.splice(0, this.logs.length - 4000);
      const readyText = READY_TEXT[name];
      if (!ready && readyText !== null && text.includes(readyText)) ready = true;
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.on('exit', (code, signal) => {
      this.procs.delete(id);
      this.httpPorts.delete(id);
      this.logs.push(`[${id}] exited (${signal ?? code})`);
    });
    const deadline = Date.now() + this.readyTimeoutMs;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${id} exited during start (${child.signalCode ?? child.exitCode})`);
      if (name === 'gateway' && !ready) {
        try {
          ready = (await fetch(`${this.url}/readyz`)).ok;
        } catch {
          ready = false;
        }
      }
      if (ready) return child;
      if (Date.now() > deadline) throw new Error(`${id} not ready within ${this.readyTimeoutMs / 1000} s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The live processes of a service. */
  processes(name: ServiceName): ChildProcess[] {
    return [...this.procs.entries()].filter(([id]) => id.startsWith(`${name}#`)).map(([, c]) => c);
  }

  /** Sends `signal` to every process of the service and waits for them to exit. */
  async kill(name: ServiceName, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await Promise.all(
      this.processes(name).map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
            c.kill(signal);
          }),
      ),
    );
  }

  /** The output lines kept so far (the last 4000), each prefixed with its process id: `[decoder#2] {…}`. */
  logLines(): readonly string[] {
    return this.logs;
  }

  /** The live process ids of a service ('decoder#2', …). */
  processIds(name: ServiceName): string[] {
    return [...this.procs.keys()].filter((id) => id.startsWith(`${name}#`));
  }

  dumpLogs(): void {
    process.stderr.write(`--- pipeline logs (last ${Math.min(200, this.logs.length)} lines) ---\n${this.logs.slice(-200).join('\n')}\n`);
  }

  async stop(): Promise<void> {
    // a clean stop when node options were given (a --cpu-prof profile is written at exit), else at once
    const signal = SERVICE_NODE_ARGS.length > 0 ? 'SIGTERM' : 'SIGKILL';
    for (const name of ['gateway', 'encoder', 'decoder'] as const) await this.kill(name, signal);
    await this.redis.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
