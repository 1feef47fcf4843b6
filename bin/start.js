#!/usr/bin/env node
// `npm start`: builds dist/ when it is missing or older than what it compiles (src/, simulators/,
// bench/tool/), then runs the gateway.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function newest(dir) {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

export function ensureBuilt() {
  const out = join(root, 'dist', 'src', 'main.js');
  const tsc = join(root, 'node_modules', '.bin', 'tsc');
  // A runtime image ships dist/ and no compiler (Dockerfile): what was built is what runs.
  if (existsSync(out) && !existsSync(tsc)) return;
  const sources = ['src', 'simulators', join('bench', 'tool')].map((d) => newest(join(root, d)));
  if (existsSync(out) && statSync(out).mtimeMs >= Math.max(...sources)) return;
  process.stderr.write('inkgate: building dist/ ...\n');
  // On this node, not whichever `#!/usr/bin/env node` would find first on PATH.
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  ensureBuilt();
  const { main } = await import(join(root, 'dist', 'src', 'main.js'));
  await main(process.argv.slice(2));
}
