#!/usr/bin/env node
// Entry point of the `csa2` command; the implementation is compiled to dist/ by `npm ci` (prepare).
import { existsSync } from 'node:fs';
const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('csa2: not built yet; run `npm ci` (or `npm run build`) at the repository root');
  process.exit(1);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv.slice(2));
