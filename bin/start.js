#!/usr/bin/env node
// `npm start`: builds dist/ when it is missing or older than src/, then runs the gateway.
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
  const out = join(root, 'dist', 'main.js');
  const tsc = join(root, 'node_modules', '.bin', 'tsc');
  // A runtime image ships dist/ and no compiler (Dockerfile): what was built is what runs.
  if (existsSync(out) && !existsSync(tsc)) return;
  if (existsSync(out) && statSync(out).mtimeMs >= newest(join(root, 'src'))) return;
  process.stderr.write('inkgate: building dist/ ...\n');
  // On this node, not whichever `#!/usr/bin/env node` would find first on PATH.
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  ensureBuilt();
  const { main } = await import(join(root, 'dist', 'main.js'));
  await main(process.argv.slice(2));
}
