/** runWorkerProcess as a real child process: its stderr lines and exit codes (2, 1, 0, 130). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

const RUNTIME = new URL('./worker-runtime.js', import.meta.url).href;
const ENV_CONFIG = new URL('./env-config.js', import.meta.url).href;

/** Runs `runWorkerProcess` in a child with the given loadConfig/start bodies; `onStarted` may signal it. */
function runChild(loadConfig: string, start: string, onStarted?: (child: ReturnType<typeof spawn>) => void) {
  const source = `
    import { runWorkerProcess } from ${JSON.stringify(RUNTIME)};
    import { EnvConfigError } from ${JSON.stringify(ENV_CONFIG)};
    runWorkerProcess({ name: 'test-worker', loadConfig: () => { ${loadConfig} }, start: async (config) => { ${start} } });
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', source], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let started = false;
  const onData = (d: Buffer) => {
    out += d.toString();
    if (!started && out.includes('started')) {
      started = true;
      // the handlers go in once start() resolved, a few ticks after its 'started' line (as before the
      // refactor: a signal during start has its default effect); give them that time
      setTimeout(() => onStarted?.(child), 200);
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  return new Promise<{ code: number | null; out: string }>((resolve) => child.on('exit', (code) => resolve({ code, out })));
}

test('runWorkerProcess: a bad configuration exits 2 naming the variable', async () => {
  const r = await runChild("throw new EnvConfigError('CSA2_X', 'must be good');", 'throw new Error("not reached");');
  assert.equal(r.code, 2);
  assert.match(r.out, /^test-worker: bad configuration: CSA2_X: must be good\n$/);
});

test('runWorkerProcess: a failed start exits 1 with the error', async () => {
  const r = await runChild('return 1;', 'throw new Error("no model here");');
  assert.equal(r.code, 1);
  assert.match(r.out, /^test-worker: Error: no model here\n/);
});

test('runWorkerProcess: a start that cannot work (a config-invalid error, e.g. no CUDA provider) exits 2 with its message alone', async () => {
  const r = await runChild('return 1;', 'throw Object.assign(new Error("the CUDA execution provider is not installed"), { code: "config-invalid" });');
  assert.equal(r.code, 2);
  assert.match(r.out, /^test-worker: cannot start: the CUDA execution provider is not installed\n$/);
});

test('runWorkerProcess: SIGTERM closes the worker and exits 0', async () => {
  // (the timer stands for a real worker's connections, which keep the process alive)
  const r = await runChild(
    'return 7;',
    'const t = setInterval(() => undefined, 1000); console.log("started", config); return { close: async () => { clearInterval(t); console.log("closed"); } };',
    (child) => child.kill('SIGTERM'),
  );
  assert.equal(r.code, 0);
  assert.match(r.out, /started 7/);
  assert.match(r.out, /test-worker: SIGTERM: shutting down/);
  assert.match(r.out, /closed/);
});

test('runWorkerProcess: a second signal while closing exits 130 at once', async () => {
  const r = await runChild(
    'return 0;',
    'setInterval(() => undefined, 1000); console.log("started"); return { close: () => new Promise(() => console.log("closing")) };',
    (child) => {
      child.kill('SIGINT');
      child.stdout?.on('data', (d: Buffer) => {
        if (d.toString().includes('closing')) child.kill('SIGINT');
      });
    },
  );
  assert.equal(r.code, 130);
  assert.match(r.out, /test-worker: SIGINT: shutting down/);
});
