/**
 * @module errors
 * One small error hierarchy for csa2-core. Every error carries a string-literal `code`; the services
 * decide retryability and HTTP status from the code alone (deterministic codes never retry).
 */

export type Csa2ErrorCode =
  | 'config-invalid'
  | 'unsupported-feature'
  | 'checkpoint-invalid'
  | 'shape-mismatch'
  | 'input-invalid'
  | 'cache-format'
  | 'runtime'
  // object storage and artifacts (@csa2/artifacts)
  | 'store-config'
  | 'store-unavailable'
  | 'not-found'
  | 'artifact-corrupt'
  | 'artifact-missing'
  | 'model-mismatch'
  | 'unsupported-version';

export class Csa2Error extends Error {
  readonly code: Csa2ErrorCode;
  constructor(code: Csa2ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A config field is missing, has the wrong type or an impossible value; `field` is its JSON key path. */
export class ConfigError extends Csa2Error {
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super('config-invalid', `config: ${field}: ${message}`, options);
    this.field = field;
  }
}

/** The config turns on a feature this implementation does not run (Engram, vision, DSpark/MTP, fp8 weights). */
export class UnsupportedFeatureError extends Csa2Error {
  readonly feature: string;
  constructor(feature: string, message: string) {
    super('unsupported-feature', message);
    this.feature = feature;
  }
}

/** A checkpoint file or tensor is missing, malformed or mis-shaped; `tensor` names it when known. */
export class CheckpointError extends Csa2Error {
  readonly tensor: string | undefined;
  constructor(message: string, options?: { tensor?: string; cause?: unknown }) {
    super('checkpoint-invalid', message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.tensor = options?.tensor;
  }
}

/** A tensor handed between components has the wrong dims. */
export class ShapeError extends Csa2Error {
  constructor(label: string, expected: readonly (number | string)[], actual: readonly number[]) {
    super('shape-mismatch', `${label}: expected dims [${expected.join(', ')}], got [${actual.join(', ')}]`);
  }
}

/** Bad user input: token ids out of range, empty prompt, prompt longer than max_seq_len, bad sampling params. */
export class InputError extends Csa2Error {
  constructor(message: string) {
    super('input-invalid', message);
  }
}
