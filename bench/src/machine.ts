/**
 * @module machine
 * Facts about the machine a bench ran on (printed above every table) and the process's peak RSS.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, totalmem, loadavg } from 'node:os';

export interface MachineFacts {
  readonly cpuModel: string;
  /** Logical cores node may use (os.availableParallelism). */
  readonly cores: number;
  readonly totalMemoryBytes: number;
  readonly nodeVersion: string;
  /** The onnxruntime-node version @csa2/core runs on ("unknown" when it cannot be found). */
  readonly onnxruntimeVersion: string;
  readonly platform: string;
  /** 1-minute load average when the facts were taken: other work on the machine makes timings noisy. */
  readonly loadAverage1m: number;
}

/**
 * The onnxruntime-node version, read from the package.json that @csa2/core resolves (the bench never
 * imports onnxruntime itself: runtime/ort-session.ts in csa2-core is the only importer).
 */
export function onnxruntimeVersion(): string {
  try {
    const require = createRequire(import.meta.url);
    const fromCore = createRequire(require.resolve('@csa2/core'));
    const pkg = JSON.parse(readFileSync(fromCore.resolve('onnxruntime-node/package.json'), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

export function machineFacts(): MachineFacts {
  const list = cpus();
  return {
    cpuModel: (list[0]?.model ?? 'unknown CPU').replace(/\s+/g, ' ').trim(),
    cores: availableParallelism(),
    totalMemoryBytes: totalmem(),
    nodeVersion: process.version,
    onnxruntimeVersion: onnxruntimeVersion(),
    platform: `${process.platform} ${process.arch}`,
    loadAverage1m: loadavg()[0] ?? 0,
  };
}

/**
 * Peak resident set size of this process so far, in bytes: VmHWM of /proc/self/status on Linux,
 * getrusage's maxrss elsewhere. Not maxrss on Linux: it survives execve, so a child process starts
 * with its parent's peak at the fork (a 40 MB child of a 500 MB process reports 481 MB), which made
 * the per-process figures of the suites that spawn decoders meaningless. VmHWM is the peak of this
 * process's own address space (every thread).
 */
export function peakRssBytes(): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m !== null) return Number(m[1]) * 1024;
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS * 1024;
}
