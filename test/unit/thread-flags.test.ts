// What a worker thread takes from its process's Node flags: the module loaders and source maps,
// never a process-wide flag, which Node refuses in a thread (the gateway builds its token-count
// table on a thread at start-up, so such a flag used to stop it from starting at all).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import t from 'tap';
import { threadExecArgv } from '../../src/util/one-worker.js';
import { productCode } from '../helpers/product-code.js';

t.test('loaders and source maps are kept, with their values; anything else is left out', async (t) => {
  t.same(
    threadExecArgv([
      '--expose-gc',
      '--import',
      'file:///x/register.js',
      '--max-old-space-size=256',
      '--input-type=module',
      '--enable-source-maps',
      '--require=./r.cjs',
      '--cpu-prof',
      '--conditions',
      'dev',
      '--title',
      'inkgate',
    ]),
    ['--import', 'file:///x/register.js', '--enable-source-maps', '--require=./r.cjs', '--conditions', 'dev'],
  );
  t.same(threadExecArgv(['--input-type', 'module', '--loader=x']), ['--loader=x']);
});

t.test('the product starts its token-count thread under process-wide flags an operator may pass', async (t) => {
  const code = productCode();
  const script = `const m = await import(${JSON.stringify(code.url('lanes/responses/token-count.js'))}); console.log(typeof m.rankTable);`;
  const r = spawnSync(process.execPath, ['--expose-gc', '--max-old-space-size=512', ...code.execArgv, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    cwd: join(import.meta.dirname, '..', '..'),
  });
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout.trim(), 'object');
});
