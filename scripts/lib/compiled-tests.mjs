// The compiled test files of the workspace: every file under packages/, services/, test/ and bench/
// whose path has a dist/ folder and whose name ends with `suffix`, sorted, filtered by substrings of
// their path relative to `root` (none: all).
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

function* walk(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* walk(path);
    else yield path;
  }
}

export function compiledTests(root, suffix, filters = []) {
  const files = [];
  for (const r of ['packages', 'services', 'test', 'bench'].map((d) => join(root, d))) {
    try {
      statSync(r);
    } catch {
      continue;
    }
    for (const f of walk(r)) if (f.endsWith(suffix) && f.includes('/dist/')) files.push(f);
  }
  return files.filter((f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s))).sort();
}
