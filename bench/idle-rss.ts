// Idle memory of one gateway: its RSS before the product is imported, after the import, and after
// start-up once it has been idle for a while, with the V8 heap and where the rest lives
// (/proc/self/smaps_rollup). The gateway runs from the built tree (dist/: what `npm start` runs) in
// a plain `node` child of its own, with no loader (a loader's own memory would be counted too), on
// the given Postgres (its own schema) and the default configuration otherwise.
//   npm run build && DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//   node --import ./test/loader/register.js bench/idle-rss.ts [--idle-ms 4000]
import { spawnSync } from 'node:child_process';

const dist = (path: string): string => new URL(`../dist/${path}`, import.meta.url).href;

const CHILD = (idleMs: number, databaseUrl: string): string => `
import { readFileSync, readdirSync } from 'node:fs';
const mb = (b) => Math.round((b / 1048576) * 10) / 10;
const atStart = process.memoryUsage().rss;
const { loadConfig } = await import(${JSON.stringify(dist('config/config.js'))});
const { createGateway } = await import(${JSON.stringify(dist('gateway.js'))});
const { silentLogger } = await import(${JSON.stringify(dist('util/log.js'))});
const afterImport = process.memoryUsage().rss;
const cfg = loadConfig({}, { server: { port: 0, host: '127.0.0.1' }, db: { url: ${JSON.stringify(databaseUrl)}, schema: 'bench_idle_rss' } });
const gw = await createGateway(cfg, { log: silentLogger });
await new Promise((r) => setTimeout(r, ${idleMs}));
const m = process.memoryUsage();
const kb = Object.fromEntries(readFileSync('/proc/self/smaps_rollup', 'utf8').split('\\n').map((l) => /^(\\w+):\\s+(\\d+) kB/.exec(l)).filter(Boolean).map((x) => [x[1], Number(x[2])]));
console.log(JSON.stringify({
  node: process.version,
  rssMb: { atStart: mb(atStart), afterImport: mb(afterImport), idle: mb(m.rss) },
  heapUsedMb: mb(m.heapUsed), heapTotalMb: mb(m.heapTotal), externalMb: mb(m.external),
  threads: readdirSync('/proc/self/task').length,
  smapsMb: { anonymous: mb(kb.Anonymous * 1024), sharedClean: mb(kb.Shared_Clean * 1024), privateClean: mb(kb.Private_Clean * 1024) },
}));
await gw.close();
process.exit(0);
`;

function main(argv: readonly string[]): number {
  const i = argv.indexOf('--idle-ms');
  const idleMs = i === -1 ? 4000 : Number(argv[i + 1]);
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    console.error('idle-rss: set DATABASE_URL (the gateway needs its Postgres)');
    return 2;
  }
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', CHILD(idleMs, databaseUrl)], { encoding: 'utf8', timeout: 60_000 + idleMs });
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  return r.status ?? 1;
}

process.exitCode = main(process.argv.slice(2));
