// The suite's own TypeScript loader (test/loader): every test process runs on it alone (tap's
// ts-node and mock loaders would double each process's start-up), a `.js` import finds its `.ts`,
// and a file is transpiled once per content: the cache entry is reused, and an edit makes a new one.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { TS_LOADER } from '../helpers/product-code.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cacheDir = join(root, 'node_modules', '.cache', 'inkgate-ts');

t.test('this process runs on the test loader, without ts-node or the mock loader', async (t) => {
  const flags = process.execArgv.join(' ');
  t.match(flags, /test\/loader\/register\.js/);
  t.notMatch(flags, /@tapjs\/typescript|ts-node/);
  t.notMatch(flags, /@tapjs\/mock/);
});

t.test('a .ts file runs, its .js import finds the .ts, and its transpile is cached by content', async (t) => {
  const dir = mkdtempSync(join(root, 'test', '.loader-probe-'));
  const tag = `probe${process.pid}`;
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, `${tag}-dep.ts`), 'export const n: number = 41;\n');
  const main = join(dir, `${tag}-main.ts`);
  const write = (k: number) => writeFileSync(main, `import { n } from './${tag}-dep.js';\nconst k: number = ${k};\nconsole.log(n + k);\n`);
  const run = () => spawnSync(process.execPath, ['--import', TS_LOADER, main], { encoding: 'utf8' });
  // Only this test's entries: other test processes fill the cache at the same time.
  const entries = () => new Set(readdirSync(cacheDir).filter((f) => f.startsWith(`${tag}-`)));

  write(1);
  const first = run();
  t.equal(first.status, 0, first.stderr);
  t.equal(first.stdout.trim(), '42');
  const afterFirst = entries();
  t.equal(afterFirst.size, 2, 'one entry for each file');
  const again = run();
  t.equal(again.stdout.trim(), '42');
  t.same(entries(), afterFirst, 'the second run made no new cache entry');
  write(2);
  const edited = run();
  t.equal(edited.stdout.trim(), '43', 'an edit is never served stale');
  const added = [...entries()].filter((f) => !afterFirst.has(f));
  t.equal(added.length, 1, 'the edited file got one new entry; its unchanged import did not');
  t.match(added[0], new RegExp(`^${tag}-main-`));
  for (const f of entries()) rmSync(join(cacheDir, f));
});
