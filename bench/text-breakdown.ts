// Where inkgate's added latency goes on a text lane, at concurrency 1 (a profiling aid).
//   node --import ./test/loader/register.js bench/text-breakdown.ts [--lane messages|responses] [--n 3000] [--stream] [--conns 1] [--engine node|uws]
// The simulators run in a child (bench/lib/sims-child.ts); the gateway and the load run
// here, so wrapped calls (each pg query, the ledger moves, the vendor request) time themselves.
// Numbers are wall time around each await, which at c=1 is the round trip plus event-loop turns.
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { startBillingGateway } from './lib/billing-gateway.js';
import { percentile } from './lib/load.js';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : dflt);
const lane = arg('--lane', 'messages');
const n = Number(arg('--n', '3000'));
const conns = Number(arg('--conns', '1'));
const stream = process.argv.includes('--stream');
// --engine node|uws: the HTTP engine measured (default: the configuration's auto).
const engine = process.argv.includes('--engine') ? (arg('--engine', 'node') as 'node' | 'uws') : undefined;
// --load-child: the load generator runs in a child, so this process's CPU (and a --cpu-prof of
// it) is the gateway's alone; the step timings are still taken here.
const loadChild = process.argv.includes('--load-child');

const samples = new Map<string, number[]>();
const note = (k: string, ms: number) => {
  let a = samples.get(k);
  if (!a) samples.set(k, (a = []));
  a.push(ms);
};
function wrap<T extends object>(obj: T, method: string, label: (args: unknown[]) => string): void {
  const o = obj as Record<string, (...a: unknown[]) => unknown>;
  const orig = o[method]!.bind(obj);
  o[method] = (...a: unknown[]) => {
    const t0 = performance.now();
    const r = orig(...a);
    if (r && typeof (r as Promise<unknown>).then === 'function') {
      return (r as Promise<unknown>).then((v) => (note(label(a), performance.now() - t0), v));
    }
    return r;
  };
}

async function main(): Promise<void> {
  const simsChild = fileURLToPath(new URL('./lib/sims-child.ts', import.meta.url));
  const simsP = fork(simsChild, [], { execArgv: process.execArgv });
  const sims = await new Promise<{ anthropic: string; openai: string }>((r) => simsP.once('message', r as never));
  const stack = await startBillingGateway(sims, 'bench_brk', engine === undefined ? {} : { server: { engine } });
  const gw = stack.gw;
  const pool = gw.services.pool;

  let recording = false;
  const sqlLabel = (a: unknown[]) => {
    const q = a[0] as string | { name?: string; text: string };
    const t = typeof q === 'string' ? q : (q.name ?? q.text);
    return 'pg ' + t.replace(/\s+/g, ' ').slice(0, 50);
  };
  wrap(pool, 'query', (a) => (recording ? sqlLabel(a) : 'warm'));
  wrap(gw.services.ledger, 'reserve', () => (recording ? 'ledger.reserve' : 'warm'));
  wrap(gw.services.ledger, 'settle', () => (recording ? 'ledger.settle' : 'warm'));

  const isMsg = lane === 'messages';
  let body = isMsg
    ? JSON.stringify({ model: 'sonnet', max_tokens: 256, messages: [{ role: 'user', content: 'Benchmark prompt of modest size.' }] })
    : JSON.stringify({ model: 'astra', max_output_tokens: 256, input: 'Benchmark prompt of modest size.' });
  if (stream) body = body.replace(/^\{/, '{"stream":true,');
  const client = new Pool(gw.url, { connections: conns });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` };
  const path = isMsg ? '/v1/messages' : '/v1/responses';
  const total: number[] = [];
  let done = 0;
  const worker = async () => {
    while (done < n + 300) {
      const i = done++;
      if (i === 300) recording = true;
      const t0 = performance.now();
      const r = await client.request({ path, method: 'POST', headers, body });
      await r.body.arrayBuffer();
      if (r.statusCode !== 200) throw new Error('status ' + r.statusCode);
      if (i >= 300) total.push(performance.now() - t0);
    }
  };
  // Postgres CPU: the backends of our pool (same machine), read from /proc before and after.
  const pgTicks = async (): Promise<number> => {
    const pids = (await pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = 'inkgate'`)).rows;
    let t = 0;
    for (const { pid } of pids) {
      try {
        const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        t += Number(f[11]) + Number(f[12]);
      } catch {
        /* not on this machine */
      }
    }
    return t;
  };
  if (loadChild) {
    // Warm up in process (JIT, pool connections), then measure with the load in a child.
    for (let i = 0; i < 300; i++) {
      const r = await client.request({ path, method: 'POST', headers, body });
      await r.body.arrayBuffer();
    }
  }
  const pg0 = await pgTicks();
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  if (loadChild) {
    recording = true;
    const c = fork(
      fileURLToPath(import.meta.url),
      ['--role', 'load', '--url', gw.url, '--path', path, '--body', body, '--key', stack.key, '--n', String(n), '--conns', String(conns)],
      {
        execArgv: withoutProfiling(process.execArgv),
      },
    );
    total.push(...(await new Promise<number[]>((r) => c.once('message', r as never))));
  } else await Promise.all(Array.from({ length: conns }, worker));
  const cpu = process.cpuUsage(cpu0);
  const secs = (performance.now() - t0) / 1000;
  const pgUs = ((await pgTicks()) - pg0) * 10_000;
  note('end-to-end', 0);
  samples.set('end-to-end', total);
  console.log(
    `# ${lane}${stream ? ' stream' : ''} c=${conns}: ${(total.length / secs).toFixed(0)} req/s, ${((cpu.user + cpu.system) / total.length).toFixed(0)} µs CPU/req (${loadChild ? 'gateway alone' : 'gateway + client in this process'}), Postgres backends ${(pgUs / (loadChild ? n : n + 300)).toFixed(0)} µs/req`,
  );
  console.log('| step | count | p50 ms | p90 ms | p99 ms |');
  console.log('|---|---|---|---|---|');
  for (const [k, a] of samples) {
    if (k === 'warm') continue;
    const s = Float64Array.from(a).sort();
    console.log(`| ${k} | ${a.length} | ${percentile(s, 50).toFixed(3)} | ${percentile(s, 90).toFixed(3)} | ${percentile(s, 99).toFixed(3)} |`);
  }
  const stats = gw.services.ledger.batchStats();
  if (stats) console.log('ledger batches', JSON.stringify(stats));
  await client.close();
  await stack.stop();
  simsP.send('stop');
}

async function load(): Promise<void> {
  const client = new Pool(arg('--url', ''), { connections: conns });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${arg('--key', '')}` };
  const path = arg('--path', ''),
    body = arg('--body', '');
  const total: number[] = [];
  let done = 0;
  const worker = async () => {
    while (done < n) {
      done++;
      const t0 = performance.now();
      const r = await client.request({ path, method: 'POST', headers, body });
      await r.body.arrayBuffer();
      if (r.statusCode !== 200) throw new Error('status ' + r.statusCode);
      total.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: conns }, worker));
  await client.close();
  process.send!(total, () => process.exit(0));
}

if (arg('--role', 'main') === 'load') void load();
else void main();

/** `argv` without the CPU profiler's flags, and the value after a flag written apart from it (`--cpu-prof-dir DIR`). */
function withoutProfiling(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--cpu-prof')) out.push(a);
    else if (a !== '--cpu-prof' && !a.includes('=')) i++;
  }
  return out;
}
