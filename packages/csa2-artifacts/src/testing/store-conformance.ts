/**
 * @module testing/store-conformance
 * The conformance suite every ObjectStore backend runs (store/fs-store.test.ts, store/s3-store.test.ts): the
 * behaviour store/object-store promises, checked the same way for each. Each test opens a fresh,
 * empty store and cleans it up afterwards.
 *
 * Concurrent ifAbsent puts: by default exactly one of them must win. A backend whose ifAbsent is
 * not exclusive (S3 in head-then-put mode) says so through `ifAbsentIsExclusive`; it must still
 * guarantee that at least one wins, that losers wrote nothing, and that the stored object is the
 * whole body of one winner.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { InvalidKeyError, ObjectNotFoundError } from '../errors.js';
import type { ObjectInfo, ObjectStore } from '../store/object-store.js';

export interface OpenedStore<S extends ObjectStore> {
  readonly store: S;
  /** Closes the store and removes everything it wrote. */
  cleanup(): Promise<void>;
}

export interface ConformanceOptions<S extends ObjectStore> {
  /**
   * Whether concurrent ifAbsent puts of one key have exactly one winner in this store.
   * @defaultValue always true
   */
  readonly ifAbsentIsExclusive?: (store: S) => Promise<boolean> | boolean;
}

/** Keys every backend must refuse, with what is wrong with each. */
export const INVALID_KEYS: readonly (readonly [key: string, why: string])[] = [
  ['', 'empty'],
  ['../x', 'parent segment'],
  ['a/../b', 'inner parent segment'],
  ['./x', 'dot segment'],
  ['/abs', 'absolute'],
  ['a//b', 'empty segment'],
  ['a/', 'trailing slash'],
  ['a b', 'space'],
  ['caf\u00e9', 'non-ASCII'],
  ['\u{1F600}', 'emoji'],
  ['a\u0000b', 'NUL'],
  ['a\\b', 'backslash'],
  ['a~b', 'tilde (outside the alphabet)'],
  ['a#b', 'hash (outside the alphabet)'],
  ['a:b', 'colon'],
  ['x'.repeat(201), 'segment over 200 characters'],
  [`${'x/'.repeat(512)}x`, 'key over 1024 characters'],
];

/** Valid keys at the edges of the rules. */
export const EDGE_VALID_KEYS: readonly string[] = ['.hidden', '..a', 'a..', 'A-Z.0=9_x', 'a/b/c/d/e/f/g', 'x'.repeat(200)];

function bytes(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

function randomBody(lengthBytes: number): Uint8Array {
  return new Uint8Array(randomBytes(lengthBytes));
}

/** An ObjectInfo without its time (for comparisons), or null. */
export function keyAndSize(info: ObjectInfo | null): { key: string; sizeBytes: number } | null {
  return info === null ? null : { key: info.key, sizeBytes: info.sizeBytes };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function sortedKeys(keys: Iterable<string>): string[] {
  return [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Registers the conformance tests of one backend with node:test.
 * @example runObjectStoreConformance('FsObjectStore', async () => { const root = await mkdtemp(…); return { store: new FsObjectStore(root), cleanup: () => rm(root, { recursive: true }) }; });
 */
export function runObjectStoreConformance<S extends ObjectStore>(name: string, open: () => Promise<OpenedStore<S>>, options: ConformanceOptions<S> = {}): void {
  describe(`${name} conforms to ObjectStore`, () => {
    let opened: OpenedStore<S> | undefined;
    const store = (): S => {
      assert.ok(opened, 'store not opened');
      return opened.store;
    };
    beforeEach(async () => {
      opened = await open();
    });
    afterEach(async () => {
      const current = opened;
      opened = undefined;
      await current?.cleanup();
    });

    describe('put and get', () => {
      it('round-trips an empty object, one byte and a few MiB of random bytes', async () => {
        const bodies = new Map<string, Uint8Array>([
          ['empty', new Uint8Array(0)],
          ['one', bytes(0xa5)],
          ['big/random', randomBody(3 * 1024 * 1024 + 17)],
        ]);
        for (const [key, body] of bodies) assert.equal(await store().put(key, body), true);
        for (const [key, body] of bodies) {
          assert.deepEqual(await store().get(key), body, key);
          assert.deepEqual(keyAndSize(await store().head(key)), { key, sizeBytes: body.byteLength });
        }
      });

      it('keeps the bytes as they were at put time', async () => {
        const body = bytes(1, 2, 3, 4);
        await store().put('k', body);
        body.fill(9);
        assert.deepEqual(await store().get('k'), bytes(1, 2, 3, 4));
      });

      it('overwrites an object with a shorter one', async () => {
        await store().put('k', randomBody(1000));
        const second = randomBody(10);
        assert.equal(await store().put('k', second), true);
        assert.deepEqual(await store().get('k'), second);
        assert.deepEqual(keyAndSize(await store().head('k')), { key: 'k', sizeBytes: 10 });
      });

      it('throws ObjectNotFoundError naming the key for an absent object', async () => {
        await store().put('a/b', bytes(1));
        for (const key of ['missing', 'a/c', 'a/b/c']) {
          await assert.rejects(store().get(key), (err: unknown) => err instanceof ObjectNotFoundError && err.key === key);
        }
      });

      it('accepts keys at the edges of the rules', async () => {
        for (const [index, key] of EDGE_VALID_KEYS.entries()) {
          assert.equal(await store().put(key, bytes(index)), true, key);
          assert.deepEqual(await store().get(key), bytes(index), key);
        }
        assert.deepEqual(
          (await store().list('')).map((info) => info.key),
          sortedKeys(EDGE_VALID_KEYS),
        );
      });
    });

    describe('get options', () => {
      it('reads into a given buffer when it is large enough, else into a new one; a size hint never changes the bytes', async () => {
        const body = randomBody(300_000);
        await store().put('obj', body);
        const big = new Uint8Array(400_000).fill(0xee);
        const got = await store().get('obj', { into: big, sizeBytesHint: body.byteLength });
        assert.deepEqual(got, body);
        assert.equal(got.buffer, big.buffer, 'the result is a view of the given buffer');
        assert.equal(got.byteOffset, big.byteOffset);
        const small = new Uint8Array(1000).fill(0xee);
        const fresh = await store().get('obj', { into: small });
        assert.deepEqual(fresh, body);
        assert.notEqual(fresh.buffer, small.buffer);
        assert.ok(
          small.every((b) => b === 0xee),
          'a buffer too small is left untouched',
        );
        for (const hint of [0, 1, body.byteLength - 1, body.byteLength + 1, 10 * body.byteLength]) {
          assert.deepEqual(await store().get('obj', { sizeBytesHint: hint }), body, `hint ${hint}`);
        }
        await assert.rejects(
          store().get('absent', { into: big, sizeBytesHint: 10 }),
          (err: unknown) => err instanceof ObjectNotFoundError && err.key === 'absent',
        );
      });
    });

    describe('ifAbsent', () => {
      it('writes when absent, then returns false and keeps the first bytes', async () => {
        const first = randomBody(100);
        assert.equal(await store().put('k', first, { ifAbsent: true }), true);
        assert.equal(await store().put('k', randomBody(50), { ifAbsent: true }), false);
        assert.deepEqual(await store().get('k'), first);
        assert.deepEqual(keyAndSize(await store().head('k')), { key: 'k', sizeBytes: 100 });
      });

      it('writes again after the object was deleted', async () => {
        await store().put('k', bytes(1), { ifAbsent: true });
        await store().delete('k');
        assert.equal(await store().put('k', bytes(2), { ifAbsent: true }), true);
        assert.deepEqual(await store().get('k'), bytes(2));
      });

      it('lets one of several concurrent writers win (exactly one where exclusive)', async () => {
        const exclusive = options.ifAbsentIsExclusive === undefined ? true : await options.ifAbsentIsExclusive(store());
        const writerCount = 8;
        const bodies = Array.from({ length: writerCount }, (_, index) => {
          const body = randomBody(64);
          body[0] = index; // distinct bodies even if the random bytes collide
          return body;
        });
        const results = await Promise.all(bodies.map((body) => store().put('contended/key', body, { ifAbsent: true })));
        const winners = bodies.filter((_, index) => results[index] === true);
        if (exclusive) assert.equal(winners.length, 1, `winners: ${results.join(',')}`);
        else assert.ok(winners.length >= 1, `no writer won: ${results.join(',')}`);
        const stored = await store().get('contended/key');
        assert.ok(
          winners.some((body) => Buffer.from(body).equals(stored)),
          'the stored object is not the whole body of a writer that returned true',
        );
        assert.deepEqual(
          (await store().list('contended/')).map((info) => info.key),
          ['contended/key'],
        );
      });
    });

    describe('getRange', () => {
      const sizeBytes = 1000;
      let body: Uint8Array;
      beforeEach(async () => {
        body = randomBody(sizeBytes);
        await store().put('r', body);
      });

      it('reads the start, the middle, the end and the whole object', async () => {
        for (const [offset, length] of [
          [0, 1],
          [0, 10],
          [123, 456],
          [sizeBytes - 7, 7],
          [sizeBytes - 1, 1],
          [0, sizeBytes],
        ] as const) {
          assert.deepEqual(await store().getRange('r', { offset, length }), body.subarray(offset, offset + length), `[${offset}, +${length})`);
        }
      });

      it('returns zero bytes for a zero-length range inside or at the end', async () => {
        for (const offset of [0, 500, sizeBytes]) {
          const got = await store().getRange('r', { offset, length: 0 });
          assert.equal(got.byteLength, 0, `offset ${offset}`);
        }
      });

      it('throws RangeError past the end and for malformed ranges', async () => {
        for (const [offset, length] of [
          [sizeBytes - 5, 6],
          [0, sizeBytes + 1],
          [sizeBytes, 1],
          [sizeBytes + 1, 0],
          [5000, 10],
          [-1, 2],
          [0, -1],
          [1.5, 2],
          [0, Number.NaN],
        ] as const) {
          await assert.rejects(store().getRange('r', { offset, length }), RangeError, `[${offset}, +${length})`);
        }
      });

      it('handles an empty object', async () => {
        await store().put('e', new Uint8Array(0));
        assert.equal((await store().getRange('e', { offset: 0, length: 0 })).byteLength, 0);
        await assert.rejects(store().getRange('e', { offset: 0, length: 1 }), RangeError);
      });

      it('throws ObjectNotFoundError for an absent object', async () => {
        await assert.rejects(store().getRange('nope', { offset: 0, length: 1 }), ObjectNotFoundError);
        await assert.rejects(store().getRange('nope', { offset: 0, length: 0 }), ObjectNotFoundError);
      });
    });

    describe('head', () => {
      it('returns null for an absent object and the size for a present one', async () => {
        assert.equal(await store().head('nope'), null);
        await store().put('dir/obj', randomBody(33));
        assert.deepEqual(keyAndSize(await store().head('dir/obj')), { key: 'dir/obj', sizeBytes: 33 });
        assert.equal(await store().head('dir'), null, 'a prefix of a key is not an object');
        assert.equal(await store().head('dir/ob'), null);
      });
    });

    describe('list', () => {
      const keys = ['a/b/c', 'a/b/d', 'a/b/e/f', 'a/bc', 'a/b-x', 'a/b.y', 'a.txt', 'ab', 'b/x', 'z'];
      beforeEach(async () => {
        for (const [index, key] of keys.entries()) await store().put(key, randomBody(index + 1));
      });

      it('lists everything, sorted, with sizes', async () => {
        const all = await store().list('');
        assert.deepEqual(
          all.map((info) => info.key),
          sortedKeys(keys),
        );
        for (const info of all) assert.equal(info.sizeBytes, keys.indexOf(info.key) + 1, info.key);
        // '-' < '.' < '/' in byte order: 'a/b-x' < 'a/b.y' < 'a/b/c'.
        assert.deepEqual(
          all.slice(0, 6).map((info) => info.key),
          ['a.txt', 'a/b-x', 'a/b.y', 'a/b/c', 'a/b/d', 'a/b/e/f'],
        );
      });

      it('filters by directory prefixes and partial segments', async () => {
        for (const prefix of ['a/', 'a/b', 'a/b/', 'a/b/e', 'a', 'b/', 'z', 'a/b/c', 'q', 'a/bz', 'a/b/c/']) {
          const expected = sortedKeys(keys.filter((key) => key.startsWith(prefix)));
          assert.deepEqual(
            (await store().list(prefix)).map((info) => info.key),
            expected,
            `prefix ${JSON.stringify(prefix)}`,
          );
        }
        assert.deepEqual(
          (await store().list('a/b/')).map((info) => info.key),
          ['a/b/c', 'a/b/d', 'a/b/e/f'],
        );
      });

      it('pages with startAfter and limit: the pages join up to the whole listing', async () => {
        const all = (await store().list('')).map((info) => info.key);
        for (const pageSize of [1, 3, 4]) {
          const paged: string[] = [];
          let after: string | undefined;
          for (;;) {
            const page = await store().list('', { limit: pageSize, ...(after !== undefined ? { startAfter: after } : {}) });
            assert.ok(page.length <= pageSize);
            for (const info of page) paged.push(info.key);
            if (page.length < pageSize) break;
            after = page.at(-1)?.key;
          }
          assert.deepEqual(paged, all, `pages of ${pageSize}`);
        }
        assert.deepEqual(
          (await store().list('a/', { startAfter: 'a/b0' })).map((info) => info.key),
          ['a/bc'],
          'startAfter need not be a key; a/b/… and a/b-x sort before a/b0',
        );
        assert.deepEqual(
          (await store().list('a/b', { startAfter: 'a/b/' })).map((info) => info.key),
          ['a/b/c', 'a/b/d', 'a/b/e/f', 'a/bc'],
        );
        assert.deepEqual(await store().list('', { limit: 0 }), []);
        assert.deepEqual(await store().list('', { startAfter: 'z' }), []);
        for (const bad of [-1, 1.5, Number.NaN]) await assert.rejects(store().list('', { limit: bad }), RangeError, `limit ${bad}`);
      });

      it('no longer lists deleted objects', async () => {
        await store().delete('a/b/e/f');
        await store().delete('a/bc');
        assert.deepEqual(
          (await store().list('a/b')).map((info) => info.key),
          ['a/b-x', 'a/b.y', 'a/b/c', 'a/b/d'],
        );
      });
    });

    describe('last-modified time, touch and conditional delete', () => {
      it('head and list report when an object was written, by the store clock', async () => {
        const before = Date.now();
        await store().put('t/a', bytes(1));
        const info = await store().head('t/a');
        assert.ok(info !== null);
        // S3 keeps whole seconds; the store and this process share a clock here (local servers)
        assert.ok(Math.abs(info.lastModifiedMs - before) < 60_000, `lastModifiedMs ${info.lastModifiedMs}, now ${before}`);
        const [listed] = await store().list('t/');
        assert.ok(listed !== undefined && Math.abs(listed.lastModifiedMs - info.lastModifiedMs) < 1000);
      });

      it('touch moves the time forward and keeps the bytes; deleteIfUnmodifiedSince deletes only what is older', async () => {
        const body = randomBody(2000);
        await store().put('t/obj', body);
        await store().put('t/other', bytes(5));
        const written = (await store().head('t/obj'))?.lastModifiedMs ?? assert.fail('absent');
        assert.equal(await store().touch('t/none'), null);
        await sleep(1100); // past S3's one-second resolution
        const touched = await store().touch('t/obj');
        assert.ok(touched !== null && touched.key === 't/obj' && touched.sizeBytes === 2000);
        assert.ok(touched.lastModifiedMs > written, `touched ${touched.lastModifiedMs} after written ${written}`);
        assert.deepEqual(await store().get('t/obj'), body, 'touch keeps the bytes');
        // Cut-off between the write and the touch: the touched object stays, the other goes.
        const cutoff = written + 1;
        assert.deepEqual(await store().deleteIfUnmodifiedSince('t/obj', cutoff), { outcome: 'modified', sizeBytes: 2000 });
        assert.deepEqual(await store().deleteIfUnmodifiedSince('t/other', touched.lastModifiedMs + 1), { outcome: 'deleted', sizeBytes: 1 });
        assert.deepEqual(await store().deleteIfUnmodifiedSince('t/other', Date.now() + 60_000), { outcome: 'absent', sizeBytes: 0 });
        assert.deepEqual(await store().get('t/obj'), body);
        assert.deepEqual(
          (await store().list('t/')).map((info) => info.key),
          ['t/obj'],
          'nothing else (no renamed-aside file) is listed',
        );
        assert.deepEqual(await store().deleteIfUnmodifiedSince('t/obj', touched.lastModifiedMs + 1), { outcome: 'deleted', sizeBytes: 2000 });
        assert.equal(await store().head('t/obj'), null);
        assert.deepEqual(await store().list(''), []);
      });
    });

    describe('delete', () => {
      it('removes the object and nothing else', async () => {
        await store().put('d/one', bytes(1));
        await store().put('d/two', bytes(2));
        await store().put('d/sub/three', bytes(3));
        await store().delete('d/one');
        await assert.rejects(store().get('d/one'), ObjectNotFoundError);
        assert.equal(await store().head('d/one'), null);
        assert.deepEqual(await store().get('d/two'), bytes(2));
        await store().delete('d/sub/three');
        assert.deepEqual(
          (await store().list('')).map((info) => info.key),
          ['d/two'],
        );
      });

      it('accepts deleting an absent key, and the store stays usable under the emptied prefix', async () => {
        await store().delete('never/was');
        await store().put('p/q/r', bytes(1));
        await store().delete('p/q/r');
        await store().delete('p/q/r');
        assert.deepEqual(await store().list(''), []);
        assert.equal(await store().put('p/q/s', bytes(2)), true);
        assert.deepEqual(await store().get('p/q/s'), bytes(2));
      });
    });

    describe('key rules', () => {
      it('every operation refuses invalid keys with InvalidKeyError', async () => {
        for (const [key, why] of INVALID_KEYS) {
          const isInvalidKey = (err: unknown): boolean => err instanceof InvalidKeyError && err.key === key;
          await assert.rejects(store().put(key, bytes(1)), isInvalidKey, `put: ${why}`);
          await assert.rejects(store().put(key, bytes(1), { ifAbsent: true }), isInvalidKey, `put ifAbsent: ${why}`);
          await assert.rejects(store().get(key), isInvalidKey, `get: ${why}`);
          await assert.rejects(store().getRange(key, { offset: 0, length: 1 }), isInvalidKey, `getRange: ${why}`);
          await assert.rejects(store().head(key), isInvalidKey, `head: ${why}`);
          await assert.rejects(store().delete(key), isInvalidKey, `delete: ${why}`);
          await assert.rejects(store().touch(key), isInvalidKey, `touch: ${why}`);
          await assert.rejects(store().deleteIfUnmodifiedSince(key, 0), isInvalidKey, `deleteIfUnmodifiedSince: ${why}`);
        }
        assert.deepEqual(await store().list(''), [], 'nothing was written');
      });

      it('list refuses invalid prefixes and accepts partial segments', async () => {
        for (const prefix of ['/a', '../', 'a//', 'a/../', 'caf\u00e9', 'a b']) {
          await assert.rejects(store().list(prefix), InvalidKeyError, `prefix ${JSON.stringify(prefix)}`);
        }
        await store().put('a/..b', bytes(1));
        await store().put('a/.c', bytes(2));
        assert.deepEqual(
          (await store().list('a/..')).map((info) => info.key),
          ['a/..b'],
        );
        assert.deepEqual(
          (await store().list('a/.')).map((info) => info.key),
          ['a/..b', 'a/.c'],
        );
      });
    });

    describe('ping', () => {
      it('resolves for a working store', async () => {
        await store().ping();
      });
    });
  });
}
