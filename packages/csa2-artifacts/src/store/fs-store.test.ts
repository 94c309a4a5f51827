/**
 * @module store/fs-store.test
 * FsObjectStore: the conformance suite, plus what only the filesystem backend has (temporary
 * files, directory pruning, file/directory clashes, the root directory).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { InvalidKeyError, ObjectNotFoundError, StoreConfigError } from '../errors.js';
import { runObjectStoreConformance } from '../testing/store-conformance.js';
import { FsObjectStore } from './fs-store.js';
import type { FsObjectStoreOptions } from './fs-store.js';

async function makeRoot(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'csa2-fs-store-'));
}

/** Every file and directory under `root`, as '/'-separated relative paths (directories end in '/'). */
async function treeOf(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .map((entry) => {
      const relative = join(entry.parentPath, entry.name).slice(root.length + 1);
      return entry.isDirectory() ? `${relative}/` : relative;
    })
    .sort();
}

runObjectStoreConformance('FsObjectStore', async () => {
  const root = await makeRoot();
  const store = new FsObjectStore(root);
  return {
    store,
    async cleanup() {
      await store.close();
      await rm(root, { recursive: true, force: true });
    },
  };
});

runObjectStoreConformance('FsObjectStore (durable: false, root created on first put)', async () => {
  const parent = await makeRoot();
  const store = new FsObjectStore(join(parent, 'not', 'yet'), { durable: false });
  return {
    store,
    async cleanup() {
      await rm(parent, { recursive: true, force: true });
    },
  };
});

describe('FsObjectStore specifics', () => {
  let root: string;
  before(async () => {
    root = await makeRoot();
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });
  const fresh = async (options: FsObjectStoreOptions = {}): Promise<FsObjectStore> => {
    const dir = await mkdtemp(join(root, 'case-'));
    return new FsObjectStore(dir, options);
  };

  it('stores key a/b/c as the file <root>/a/b/c and leaves no temporary files', async () => {
    const s = await fresh();
    await s.put('a/b/c', Uint8Array.of(1, 2, 3));
    await s.put('a/b/c', Uint8Array.of(4)); // overwrite
    await s.put('a/b/c', Uint8Array.of(5), { ifAbsent: true }); // refused
    await s.put('a/d', Uint8Array.of(6), { ifAbsent: true });
    await Promise.all(Array.from({ length: 6 }, (_, i) => s.put('a/race', Uint8Array.of(i), { ifAbsent: true })));
    assert.deepEqual(await treeOf(s.root), ['a/', 'a/b/', 'a/b/c', 'a/d', 'a/race']);
    assert.equal((await stat(join(s.root, 'a', 'b', 'c'))).size, 1);
  });

  it('does not list a temporary file a crashed writer left behind, nor other foreign names', async () => {
    const s = await fresh();
    await s.put('x/y', Uint8Array.of(1));
    await writeFile(join(s.root, 'x', '#tmp-999-deadbeef'), 'partial');
    await writeFile(join(s.root, '#tmp-1-cafe'), 'partial');
    await writeFile(join(s.root, 'x', 'has space'), 'foreign');
    await mkdir(join(s.root, 'bad dir'));
    await writeFile(join(s.root, 'bad dir', 'z'), 'foreign');
    assert.deepEqual(
      (await s.list('')).map((info) => info.key),
      ['x/y'],
    );
    assert.deepEqual(
      (await s.list('x/')).map((info) => info.key),
      ['x/y'],
    );
    // The leftover keeps its directory from being pruned, and does not block new writes.
    await s.delete('x/y');
    assert.deepEqual(await s.list(''), []);
    assert.equal(await s.put('x/y', Uint8Array.of(2), { ifAbsent: true }), true);
  });

  it('prunes directories a delete leaves empty, up to but never including the root', async () => {
    const s = await fresh();
    await s.put('p/q/r', Uint8Array.of(1));
    await s.put('p/w', Uint8Array.of(2));
    await s.delete('p/q/r');
    assert.deepEqual(await treeOf(s.root), ['p/', 'p/w']);
    await s.delete('p/w');
    assert.deepEqual(await treeOf(s.root), []);
    assert.ok((await stat(s.root)).isDirectory(), 'the root survives');
  });

  it('keeps writing while deletes prune the same directory', async () => {
    const s = await fresh({ durable: false }); // the race is in mkdir/rmdir; fsync only slows it
    for (let round = 0; round < 100; round++) {
      await s.put('hot/dir/old', Uint8Array.of(round));
      const [written] = await Promise.all([s.put(`hot/dir/new-${round}`, Uint8Array.of(round)), s.delete('hot/dir/old')]);
      assert.equal(written, true);
      assert.deepEqual(await s.get(`hot/dir/new-${round}`), Uint8Array.of(round));
      await s.delete(`hot/dir/new-${round}`);
    }
    assert.deepEqual(await treeOf(s.root), []);
  });

  it('refuses a key that clashes with a file or directory of another key, changing nothing', async () => {
    const s = await fresh();
    await s.put('a', Uint8Array.of(1));
    await assert.rejects(s.put('a/b', Uint8Array.of(2)), InvalidKeyError);
    await s.put('c/d', Uint8Array.of(3));
    await assert.rejects(s.put('c', Uint8Array.of(4)), InvalidKeyError);
    await assert.rejects(s.put('c', Uint8Array.of(4), { ifAbsent: true }), InvalidKeyError);
    // A directory is not an object.
    await assert.rejects(s.get('c'), ObjectNotFoundError);
    await assert.rejects(s.getRange('c', { offset: 0, length: 0 }), ObjectNotFoundError);
    assert.equal(await s.head('c'), null);
    await s.delete('c');
    assert.deepEqual(await treeOf(s.root), ['a', 'c/', 'c/d']);
  });

  it('does not follow symbolic links inside the root', async () => {
    const s = await fresh();
    const outside = await mkdtemp(join(root, 'outside-'));
    await writeFile(join(outside, 'secret'), 'secret');
    await symlink(join(outside, 'secret'), join(s.root, 'link'));
    await assert.rejects(s.get('link'), ObjectNotFoundError);
    assert.equal(await s.head('link'), null);
    assert.deepEqual(await s.list(''), []);
  });

  it('ping creates a missing root and fails on a root that is a file', async () => {
    const base = await mkdtemp(join(root, 'ping-'));
    const missing = new FsObjectStore(join(base, 'new', 'root'));
    await missing.ping();
    assert.ok((await stat(missing.root)).isDirectory());
    assert.deepEqual(await readdir(missing.root), [], 'the ping probe file is removed');

    await writeFile(join(base, 'file'), 'not a directory');
    await assert.rejects(new FsObjectStore(join(base, 'file')).ping(), StoreConfigError);
    await assert.rejects(new FsObjectStore(join(base, 'file', 'below')).ping(), StoreConfigError);
  });

  it('reports a root below a file as a config error on put', async () => {
    const base = await mkdtemp(join(root, 'put-'));
    await writeFile(join(base, 'file'), 'x');
    const s = new FsObjectStore(join(base, 'file', 'root'));
    await assert.rejects(s.put('k', Uint8Array.of(1)), StoreConfigError);
    await assert.rejects(s.put('d/k', Uint8Array.of(1)), StoreConfigError);
    assert.deepEqual(await s.list(''), []);
    assert.equal(await s.head('k'), null);
  });

  it('refuses a relative root and names the store by its file URL', async () => {
    assert.throws(() => new FsObjectStore('relative/dir'), StoreConfigError);
    assert.equal(new FsObjectStore('/tmp/a b/../c').url, 'file:///tmp/c');
    assert.equal(new FsObjectStore('/tmp/a b').url, 'file:///tmp/a%20b');
  });
});
