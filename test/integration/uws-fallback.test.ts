// The uWS package silently falls back to a slow pure-JS server when its native binary does not
// load. The gateway refuses that unless INKGATE_ALLOW_UWS_FALLBACK=1. UWS_USE_FALLBACK=1 (the
// package's own switch) forces the fallback, standing in for a binary that failed to load.
import { spawnSync } from 'node:child_process';
import t from 'tap';

const root = new URL('../..', import.meta.url).pathname;
const script = `
  const { loadConfig } = await import('${root}src/config/config.ts');
  const { loadUws } = await import('${root}src/server/uws.ts');
  const cfg = loadConfig();
  try { const u = loadUws(cfg.allowUwsFallback); console.log('native=' + u.native); }
  catch (e) { console.log('refused: ' + e.message.split('\\n')[0]); process.exitCode = 3; }
`;

function run(env: Record<string, string>) {
  const r = spawnSync(process.execPath, [...process.execArgv, '--input-type=module', '-e', script], {
    cwd: root,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, out: r.stdout + r.stderr };
}

t.test('native binary loads on this Node', async (t) => {
  const r = run({});
  t.equal(r.code, 0, r.out);
  t.match(r.out, /native=true/);
});

t.test('the fallback is refused by default', async (t) => {
  const r = run({ UWS_USE_FALLBACK: '1' });
  t.equal(r.code, 3, r.out);
  t.match(r.out, /refused: uWebSockets\.js native binary did not load/);
});

t.test('INKGATE_ALLOW_UWS_FALLBACK=1 lets it start on the fallback', async (t) => {
  const r = run({ UWS_USE_FALLBACK: '1', INKGATE_ALLOW_UWS_FALLBACK: '1' });
  t.equal(r.code, 0, r.out);
  t.match(r.out, /native=false/);
});
