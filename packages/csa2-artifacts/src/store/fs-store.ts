/**
 * @module store/fs-store
 * The filesystem ObjectStore (the embedded default and the reference backend). Key 'a/b/c' is the
 * file `<root>/a/b/c`; directories are created on put and pruned when a delete leaves them empty.
 *
 * - **put** writes a temporary file in the target directory, fsyncs it, then renames it over the
 *   key (readers see the old or the new object, never a mix). With `ifAbsent` it hard-links the
 *   temporary file to the key instead: link(2) fails with EEXIST when the key exists, so of many
 *   concurrent writers exactly one wins. Needs a filesystem with hard links (every local one).
 * - **temporary files** are named `#tmp-<pid>-<random>`. '#' is outside the key alphabet, so they
 *   never collide with keys and listings skip them, also when a crashed writer left one behind.
 * - **limit**: a filesystem cannot hold a file and a directory of the same name, so this store
 *   cannot hold both 'a' and 'a/b' (S3 can). Such a put throws InvalidKeyError naming the clash.
 * - **errors**: missing objects → ObjectNotFoundError; permission and read-only-filesystem errors
 *   → StoreConfigError; every other I/O error → StoreUnavailableError (with the cause).
 * - symbolic links inside the root are neither followed nor listed.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { link, lstat, mkdir, open, readdir, rename, rmdir, stat, unlink } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidKeyError, ObjectNotFoundError, StoreConfigError, StoreUnavailableError } from '../errors.js';
import { checkListOptions, checkRange, segmentProblem, validateKey, validatePrefix } from './keys.js';
import type { ByteRange, ConditionalDeleteResult, GetOptions, ListOptions, ObjectInfo, ObjectStore, PutOptions } from './object-store.js';

export interface FsObjectStoreOptions {
  /**
   * fsync each written file and its directory before put resolves (survives power loss). Turn off
   * only for scratch stores and tests. @defaultValue true
   */
  readonly durable?: boolean;
}

/** Prefix of temporary file names; '#' can never appear in a key. */
const TEMP_PREFIX = '#tmp-';
/** Prefix of an object renamed aside by deleteIfUnmodifiedSince while it decides. */
const GC_PREFIX = '#gc-';

/** Where a listing walk is: what it found, how many it may return, and what it skips. */
interface ListPage {
  readonly found: ObjectInfo[];
  readonly limit: number;
  readonly startAfter: string;
}
/** How often put retries when a concurrent delete prunes the directory it just created. */
const MAX_DIRECTORY_RETRIES = 8;

/** Error codes that mean "no such object" on the way to or at a key. */
const ABSENT_CODES = new Set(['ENOENT', 'ENOTDIR']);
/** Error codes that are about the deployment (permissions, read-only mounts), not transient. */
const CONFIG_CODES = new Set(['EACCES', 'EPERM', 'EROFS']);

function errnoCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string') return err.code;
  return undefined;
}

/**
 * ObjectStore on a local directory.
 * @example
 * const store = new FsObjectStore('/var/lib/csa2/artifacts');
 * await store.put('chunks/ab12', bytes, { ifAbsent: true });
 */
export class FsObjectStore implements ObjectStore {
  readonly url: string;
  /** The absolute root directory. */
  readonly root: string;
  readonly #durable: boolean;

  /** @throws StoreConfigError when `root` is not an absolute path. */
  constructor(root: string, options: FsObjectStoreOptions = {}) {
    if (!isAbsolute(root)) throw new StoreConfigError(`filesystem store root must be an absolute path, got ${JSON.stringify(root)}`);
    this.root = resolve(root);
    this.url = pathToFileURL(this.root).href;
    this.#durable = options.durable ?? true;
  }

  async put(key: string, body: Uint8Array, options: PutOptions = {}): Promise<boolean> {
    const path = this.#pathOf(key);
    const dir = dirname(path);
    // Fast path for idempotent writers (content-addressed chunks often exist already); the
    // race-safe decision is still link(2)'s below.
    if (options.ifAbsent === true && (await this.head(key)) !== null) return false;
    for (let attempt = 0; ; attempt++) {
      await this.#makeDirectory(key, dir);
      const tempPath = join(dir, `${TEMP_PREFIX}${process.pid}-${randomBytes(8).toString('hex')}`);
      let handle: FileHandle;
      try {
        handle = await open(tempPath, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL, 0o666);
      } catch (err) {
        // A concurrent delete pruned the (then empty) directory between mkdir and open: redo both.
        if (errnoCode(err) === 'ENOENT' && attempt < MAX_DIRECTORY_RETRIES) continue;
        throw this.#ioError(err, `put ${key}`);
      }
      try {
        try {
          await writeAll(handle, body);
          if (this.#durable) await handle.sync();
        } finally {
          await handle.close();
        }
        const written = options.ifAbsent === true ? await this.#linkIfAbsent(key, tempPath, path) : await this.#replace(key, tempPath, path);
        if (written && this.#durable) await this.#syncDirectory(dir);
        return written;
      } catch (err) {
        throw this.#ioError(err, `put ${key}`);
      } finally {
        await unlink(tempPath).catch(() => undefined); // already gone after a rename
      }
    }
  }

  async get(key: string, options: GetOptions = {}): Promise<Uint8Array> {
    const { handle, sizeBytes } = await this.#openObject(key);
    try {
      return await readAll(handle, sizeBytes, options.into);
    } catch (err) {
      throw this.#ioError(err, `get ${key}`);
    } finally {
      await handle.close();
    }
  }

  async getRange(key: string, range: ByteRange): Promise<Uint8Array> {
    validateKey(key);
    checkRange(range);
    const { handle, sizeBytes } = await this.#openObject(key);
    try {
      if (range.offset + range.length > sizeBytes) {
        throw new RangeError(`range [${range.offset}, ${range.offset + range.length}) is past the end of ${key} (${sizeBytes} bytes)`);
      }
      const out = new Uint8Array(range.length);
      let filledBytes = 0;
      while (filledBytes < range.length) {
        const { bytesRead } = await handle.read(out, filledBytes, range.length - filledBytes, range.offset + filledBytes);
        if (bytesRead === 0) throw new StoreUnavailableError(`get ${key}: file shrank while reading it`);
        filledBytes += bytesRead;
      }
      return out;
    } catch (err) {
      if (err instanceof RangeError || err instanceof StoreUnavailableError) throw err;
      throw this.#ioError(err, `get ${key}`);
    } finally {
      await handle.close();
    }
  }

  async head(key: string): Promise<ObjectInfo | null> {
    const path = this.#pathOf(key);
    try {
      const stats = await lstat(path);
      return stats.isFile() ? { key, sizeBytes: stats.size, lastModifiedMs: stats.mtimeMs } : null;
    } catch (err) {
      if (ABSENT_CODES.has(errnoCode(err) ?? '')) return null;
      throw this.#ioError(err, `head ${key}`);
    }
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ObjectInfo[]> {
    validatePrefix(prefix);
    const limit = checkListOptions(options);
    // Start at the deepest directory the prefix names whole; filter its entries by the rest. The
    // walk visits keys in byte order and skips whole directories before `startAfter`, so a page
    // costs about what it returns.
    const slash = prefix.lastIndexOf('/');
    const dirKey = slash < 0 ? '' : prefix.slice(0, slash + 1);
    const namePrefix = prefix.slice(slash + 1);
    const found: ObjectInfo[] = [];
    if (limit > 0) await this.#walk(dirKey, namePrefix, { found, limit, startAfter: options.startAfter ?? '' });
    return found;
  }

  async touch(key: string): Promise<ObjectInfo | null> {
    const path = this.#pathOf(key);
    let handle: FileHandle;
    try {
      handle = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    } catch (err) {
      if (ABSENT_CODES.has(errnoCode(err) ?? '') || errnoCode(err) === 'ELOOP') return null;
      throw this.#ioError(err, `touch ${key}`);
    }
    try {
      const before = await handle.stat();
      if (!before.isFile()) return null;
      const now = new Date();
      await handle.utimes(before.atime, now);
      const after = await handle.stat();
      return { key, sizeBytes: after.size, lastModifiedMs: after.mtimeMs };
    } catch (err) {
      throw this.#ioError(err, `touch ${key}`);
    } finally {
      await handle.close();
    }
  }

  /**
   * Exact: the object is renamed aside (atomic), its mtime read there, then it is unlinked or linked
   * back. A touch or write that came before the rename shows in that mtime; one that comes after
   * finds no object (a writer then puts it again). Between rename and relink the key is absent for
   * a moment, only for objects already older than `sinceMs` when listed.
   */
  async deleteIfUnmodifiedSince(key: string, sinceMs: number): Promise<ConditionalDeleteResult> {
    const path = this.#pathOf(key);
    const dir = dirname(path);
    const absent: ConditionalDeleteResult = { outcome: 'absent', sizeBytes: 0 };
    const current = await lstat(path).catch((err: unknown) => {
      if (ABSENT_CODES.has(errnoCode(err) ?? '')) return null;
      throw this.#ioError(err, `delete ${key}`);
    });
    if (current === null || !current.isFile()) return absent;
    if (current.mtimeMs >= sinceMs) return { outcome: 'modified', sizeBytes: current.size };
    const aside = join(dir, `${GC_PREFIX}${process.pid}-${randomBytes(8).toString('hex')}`);
    try {
      await rename(path, aside);
    } catch (err) {
      if (ABSENT_CODES.has(errnoCode(err) ?? '')) return absent;
      throw this.#ioError(err, `delete ${key}`);
    }
    try {
      const stats = await lstat(aside);
      if (stats.mtimeMs >= sinceMs) {
        // touched between the check and the rename: put it back (a writer may have put it again meanwhile: same bytes)
        await link(aside, path).catch((err: unknown) => {
          if (errnoCode(err) !== 'EEXIST') throw err;
        });
        return { outcome: 'modified', sizeBytes: stats.size };
      }
      return { outcome: 'deleted', sizeBytes: stats.size };
    } catch (err) {
      throw this.#ioError(err, `delete ${key}`);
    } finally {
      await unlink(aside).catch(() => undefined);
      await this.#pruneEmptyParents(dir);
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.#pathOf(key);
    try {
      await unlink(path);
    } catch (err) {
      const code = errnoCode(err);
      if (ABSENT_CODES.has(code ?? '')) return;
      // A directory is not an object: nothing under this key to delete.
      if ((code === 'EISDIR' || code === 'EPERM') && (await lstat(path).catch(() => null))?.isDirectory() === true) return;
      throw this.#ioError(err, `delete ${key}`);
    }
    await this.#pruneEmptyParents(dirname(path));
  }

  /** Creates the root when missing, then checks it is a directory this process can create files in. */
  async ping(): Promise<void> {
    try {
      await mkdir(this.root, { recursive: true });
    } catch (err) {
      if (errnoCode(err) === 'EEXIST' || errnoCode(err) === 'ENOTDIR') throw new StoreConfigError(`filesystem store root ${this.root} is not a directory`);
      throw this.#ioError(err, 'ping');
    }
    const stats = await stat(this.root).catch((err: unknown) => {
      throw this.#ioError(err, 'ping');
    });
    if (!stats.isDirectory()) throw new StoreConfigError(`filesystem store root ${this.root} is not a directory`);
    const probePath = join(this.root, `${TEMP_PREFIX}ping-${process.pid}-${randomBytes(8).toString('hex')}`);
    try {
      const handle = await open(probePath, 'wx');
      await handle.close();
      await unlink(probePath);
    } catch (err) {
      throw this.#ioError(err, `ping (creating a file in ${this.root})`);
    }
  }

  async close(): Promise<void> {
    // Nothing held between calls.
  }

  #pathOf(key: string): string {
    return join(this.root, ...validateKey(key));
  }

  /** Opens the object's file for reading, with its size; ObjectNotFoundError unless it is a regular file. */
  async #openObject(key: string): Promise<{ handle: FileHandle; sizeBytes: number }> {
    const path = this.#pathOf(key);
    let handle: FileHandle;
    try {
      handle = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    } catch (err) {
      if (ABSENT_CODES.has(errnoCode(err) ?? '') || errnoCode(err) === 'ELOOP') throw new ObjectNotFoundError(key);
      throw this.#ioError(err, `get ${key}`);
    }
    const stats = await handle.stat().catch(async (err: unknown) => {
      await handle.close();
      throw this.#ioError(err, `get ${key}`);
    });
    if (!stats.isFile()) {
      await handle.close();
      throw new ObjectNotFoundError(key);
    }
    return { handle, sizeBytes: stats.size };
  }

  /** mkdir -p for the key's directory. */
  async #makeDirectory(key: string, dir: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await mkdir(dir, { recursive: true });
        return;
      } catch (err) {
        // A concurrent delete pruned a parent between the steps of mkdir -p: go again.
        if (errnoCode(err) === 'ENOENT' && attempt < MAX_DIRECTORY_RETRIES) continue;
        await this.#directoryError(key, err);
      }
    }
  }

  /** Explains a failed mkdir -p: a file in the way is the root being no directory, or a key clash. */
  async #directoryError(key: string, err: unknown): Promise<never> {
    const code = errnoCode(err);
    if (code === 'ENOTDIR' || code === 'EEXIST') {
      const rootStats = await stat(this.root).catch(() => null);
      if (rootStats?.isDirectory() !== true) throw new StoreConfigError(`filesystem store root ${this.root} is not a directory`);
      throw new InvalidKeyError(key, 'a prefix of it is already an object (the filesystem store cannot hold both "a" and "a/b")');
    }
    throw this.#ioError(err, `put ${key}`);
  }

  async #replace(key: string, tempPath: string, path: string): Promise<boolean> {
    try {
      await rename(tempPath, path);
      return true;
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'EISDIR' || code === 'ENOTEMPTY' || code === 'EEXIST') throw clashWithDirectory(key);
      throw err;
    }
  }

  async #linkIfAbsent(key: string, tempPath: string, path: string): Promise<boolean> {
    try {
      await link(tempPath, path);
      return true;
    } catch (err) {
      if (errnoCode(err) !== 'EEXIST') throw err;
      const existing = await lstat(path).catch(() => null);
      if (existing?.isDirectory() === true) throw clashWithDirectory(key);
      return false;
    }
  }

  async #syncDirectory(dir: string): Promise<void> {
    const handle = await open(dir, fsConstants.O_RDONLY);
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }

  /** Removes now-empty directories from `dir` up to (never including) the root; rmdir refuses non-empty ones. */
  async #pruneEmptyParents(dir: string): Promise<void> {
    while (dir.length > this.root.length && dir.startsWith(this.root)) {
      try {
        await rmdir(dir);
      } catch {
        return; // not empty (another object or an in-flight temp file), or already gone
      }
      dir = dirname(dir);
    }
  }

  /** Appends the objects under `dirKey` whose names start with `namePrefix` to `page.found`, in key order, until the page is full. */
  async #walk(dirKey: string, namePrefix: string, page: ListPage): Promise<void> {
    const dirPath = dirKey === '' ? this.root : join(this.root, ...dirKey.slice(0, -1).split('/'));
    let entries;
    try {
      entries = await readdir(dirPath, { withFileTypes: true });
    } catch (err) {
      if (ABSENT_CODES.has(errnoCode(err) ?? '')) return; // no such directory, or pruned meanwhile
      throw this.#ioError(err, `list ${dirKey}${namePrefix}`);
    }
    // A directory's keys all start with "<name>/": sorting names so makes the walk visit keys in byte order.
    const visible = entries
      .filter((e) => e.name.startsWith(namePrefix) && segmentProblem(e.name) === null && (e.isDirectory() || e.isFile()))
      .map((e) => ({ name: e.name, isDirectory: e.isDirectory(), sortKey: `${dirKey}${e.name}${e.isDirectory() ? '/' : ''}` }))
      .sort((a, b) => (a.sortKey < b.sortKey ? -1 : a.sortKey > b.sortKey ? 1 : 0));
    let files: string[] = [];
    const flushFiles = async (): Promise<void> => {
      // stat a run of files at once; `files` holds at most what the page still takes
      const infos = await Promise.all(
        files.map(async (name) => {
          try {
            const stats = await lstat(join(dirPath, name));
            return { key: `${dirKey}${name}`, sizeBytes: stats.size, lastModifiedMs: stats.mtimeMs };
          } catch (err) {
            if (ABSENT_CODES.has(errnoCode(err) ?? '')) return null; // deleted meanwhile
            throw this.#ioError(err, `list ${dirKey}${namePrefix}`);
          }
        }),
      );
      for (const info of infos) if (info !== null && page.found.length < page.limit) page.found.push(info);
      files = [];
    };
    for (const entry of visible) {
      if (page.found.length >= page.limit) break;
      if (entry.isDirectory) {
        // every key inside sorts after the directory's own prefix and before anything after it
        if (page.startAfter >= entry.sortKey && !page.startAfter.startsWith(entry.sortKey)) continue;
        await flushFiles();
        if (page.found.length >= page.limit) break;
        await this.#walk(entry.sortKey, '', page);
      } else {
        if (entry.sortKey <= page.startAfter) continue;
        files.push(entry.name);
        // a file deleted meanwhile leaves the page short by one, and the walk goes on to fill it
        if (files.length >= Math.min(64, page.limit - page.found.length)) await flushFiles();
      }
    }
    await flushFiles();
  }

  #ioError(err: unknown, what: string): Error {
    if (err instanceof InvalidKeyError || err instanceof ObjectNotFoundError || err instanceof StoreConfigError || err instanceof StoreUnavailableError) {
      return err;
    }
    const code = errnoCode(err);
    const detail = err instanceof Error ? err.message : String(err);
    if (CONFIG_CODES.has(code ?? '')) return new StoreConfigError(`filesystem store ${this.root}: ${what}: ${detail}`);
    return new StoreUnavailableError(`filesystem store ${this.root}: ${what}: ${detail}`, { cause: err });
  }
}

/**
 * Writes all of `body` from the start of the file: one write(2) for a whole chunk object where the
 * kernel takes it (FileHandle.writeFile would split it into 512 KiB writes, each a round trip through
 * the thread pool).
 */
async function writeAll(handle: FileHandle, body: Uint8Array): Promise<void> {
  let written = 0;
  while (written < body.byteLength) {
    const { bytesWritten } = await handle.write(body, written, body.byteLength - written, written);
    written += bytesWritten;
  }
}

/**
 * Reads a file of `sizeBytes` into `into` (when large enough) or one new buffer, with as few read(2)
 * calls as the kernel allows (FileHandle.readFile reads 512 KiB at a time). Every byte is
 * overwritten, so a new buffer is not zeroed.
 */
async function readAll(handle: FileHandle, sizeBytes: number, into: Uint8Array | undefined): Promise<Uint8Array> {
  let out: Uint8Array;
  if (into !== undefined && into.byteLength >= sizeBytes) out = into.subarray(0, sizeBytes);
  else {
    const buffer = Buffer.allocUnsafeSlow(sizeBytes);
    out = new Uint8Array(buffer.buffer, buffer.byteOffset, sizeBytes); // a plain Uint8Array, like the other backends return
  }
  let filled = 0;
  while (filled < sizeBytes) {
    const { bytesRead } = await handle.read(out, filled, sizeBytes - filled, filled);
    if (bytesRead === 0) throw new Error(`file shrank from ${sizeBytes} to ${filled} bytes while reading it`);
    filled += bytesRead;
  }
  return out;
}

function clashWithDirectory(key: string): InvalidKeyError {
  return new InvalidKeyError(key, 'other objects exist under it as a prefix (the filesystem store cannot hold both "a" and "a/b")');
}
