// Hostile bodies against another client: one key sends, back to back, the worst /v1/messages bodies
// it may (absurd shapes the pre-check refuses, shapes just inside its limits, a valid 4 MiB prompt),
// while another client reads /v1/models at concurrency 1. Reports that client's p90 idle and
// loaded, per engine. The goal (docs/performance.md): loaded p90 within 50 ms of idle p90.
//   npm run bench:bodies -- [--seconds 10] [--engines uws,node]
// The gateway runs in a child (with the simulators in another), the hostile sender in a third, so
// neither the bodies' building nor their sending runs on the measured loop or the measuring one.
import { fork, type ChildProcess } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { startBillingGateway } from './lib/billing-gateway.js';
import { runLoad } from './lib/load.js';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : dflt);
const seconds = Number(arg('--seconds', '10'));
const engines = arg('--engines', 'uws,node').split(',') as Array<'uws' | 'node'>;
const self = fileURLToPath(import.meta.url);

/** An object of `n` distinct keys (base-36 names, as short as they come), from `from`, as JSON text. */
const keysObject = (n: number, from = 0): string => `{${Array.from({ length: n }, (_, i) => `"${(from + i).toString(36)}":1`).join(',')}}`;
const prompt = (extra: string) => `{"model":"sonnet","max_tokens":16,"messages":[{"role":"user","content":"hi"}]${extra}}`;

/** The bodies, each at most 4 MiB (the text cap), with what each is answered. */
function hostileBodies(): Array<{ name: string; body: string }> {
  const turns = Array.from({ length: 96 }, (_, j) => [
    { role: 'assistant', content: [{ type: 'tool_use', id: `toolu_${j}`, name: 'Bash', input: JSON.parse(keysObject(1_000)) as unknown }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${j}`, content: 'done' }] },
  ]).flat();
  return [
    // One object of 380,000 keys: refused by the pre-check (too_many).
    { name: '380k keys in one object', body: prompt(`,"system":${keysObject(380_000)}`) },
    // 96 objects of 1,000 distinct keys: refused by the pre-check (different key names).
    { name: '96k distinct keys', body: prompt(`,"system":[${Array.from({ length: 96 }, (_, j) => keysObject(1_000, j * 1_000)).join(',')}]`) },
    // 96 objects of the same 1,000 keys: inside the limits, parsed, then refused by the lane (system.0.type).
    { name: '96k keys of 1,000 names, inside the limits', body: prompt(`,"system":[${Array.from({ length: 96 }, () => keysObject(1_000)).join(',')}]`) },
    // Two arrays of 99,999 short distinct strings: inside the limits, parsed, refused by the lane.
    {
      name: '200k short strings, inside the limits',
      body: prompt(`,"system":[${[0, 1].map((j) => JSON.stringify(Array.from({ length: 99_999 }, (_, i) => (i + j * 99_999).toString(36)))).join(',')}]`),
    },
    // Valid: 96k keys of 1,000 names in tool_use inputs (serialized again for the vendor, which refuses it: above the context).
    {
      name: 'valid, 96k keys in tool inputs',
      body: JSON.stringify({ model: 'sonnet', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }, ...turns] }),
    },
    // 4 MiB of prose: parsed, checked, sent on; the vendor refuses it (above the model's context).
    { name: '4 MiB of prose', body: prompt('').replace('"hi"', JSON.stringify('lorem ipsum dolor sit amet '.repeat(150_000))) },
  ];
}

async function serve(engine: 'uws' | 'node'): Promise<void> {
  const simsP = fork(fileURLToPath(new URL('./lib/sims-child.ts', import.meta.url)), [], { execArgv: process.execArgv });
  const sims = await new Promise<{ anthropic: string; openai: string }>((r) => simsP.once('message', r as never));
  const stack = await startBillingGateway(sims, 'bench_hostile', { server: { engine } });
  // The serving loop's own view: how long it was held at most (the stall another client waits out).
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  process.send!({ url: stack.gw.url, key: stack.key, engine: stack.gw.engine });
  process.on('message', (m: string) => {
    if (m === 'reset') return delay.reset();
    if (m === 'delay') return process.send!({ p99Ms: delay.percentile(99) / 1e6, maxMs: delay.max / 1e6 });
    simsP.send('stop');
    void stack.stop().then(() => process.exit(0));
  });
}

/** Sends the bodies round-robin, one at a time, until told to stop; reports the statuses seen. */
async function hostile(url: string, key: string): Promise<void> {
  const bodies = hostileBodies().map((b) => ({ ...b, buf: Buffer.from(b.body) }));
  const seen: Record<string, Record<number, number>> = {};
  let stop = false;
  process.on('message', () => (stop = true));
  process.send!({ ready: bodies.map((b) => `${b.name} (${(b.buf.length / 1048576).toFixed(2)} MiB)`) });
  for (let i = 0; !stop; i++) {
    const b = bodies[i % bodies.length]!;
    const r = await request(`${url}/v1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: b.buf,
    });
    await r.body.arrayBuffer();
    const s = (seen[b.name] ??= {});
    s[r.statusCode] = (s[r.statusCode] ?? 0) + 1;
  }
  process.send!({ seen });
}

const once = <T>(c: ChildProcess): Promise<T> => new Promise((r) => c.once('message', r as never));

async function measure(engine: 'uws' | 'node'): Promise<string> {
  const server = fork(self, ['--serve', engine], { execArgv: process.execArgv });
  const info = await once<{ url: string; key: string; engine: string }>(server);
  const models = (label: string) => runLoad({ label, url: info.url, path: '/v1/models', connections: 1, durationMs: seconds * 1000, warmupMs: 1000 });
  const idle = await models('idle');
  const sender = fork(self, ['--hostile', info.url, info.key], { execArgv: process.execArgv });
  const ready = await once<{ ready: string[] }>(sender);
  server.send('reset');
  const loaded = await models('loaded');
  const lag = once<{ p99Ms: number; maxMs: number }>(server);
  server.send('delay');
  const loopDelay = await lag;
  const done = once<{ seen: Record<string, Record<number, number>> }>(sender);
  sender.send('stop');
  const { seen } = await done;
  sender.kill();
  server.send('stop');
  await new Promise((r) => server.once('exit', r));
  const answers = Object.entries(seen).map(
    ([name, s]) =>
      `${name}: ${Object.entries(s)
        .map(([st, n]) => `${n}x ${st}`)
        .join(', ')}`,
  );
  console.log(`# ${info.engine}: hostile bodies ${ready.ready.join('; ')}\n#   answered ${answers.join('; ')}`);
  const bad = (idle.statuses['200'] ?? 0) !== idle.requests || (loaded.statuses['200'] ?? 0) !== loaded.requests ? ' (non-200 seen)' : '';
  const sent = Object.values(seen).reduce((n, s) => n + Object.values(s).reduce((a, b) => a + b, 0), 0);
  return `| ${info.engine} | ${idle.p90Ms.toFixed(1)} | ${loaded.p90Ms.toFixed(1)} | ${(loaded.p90Ms - idle.p90Ms).toFixed(1)} | ${(loaded.p90Ms / idle.p90Ms).toFixed(1)}x | ${loaded.maxMs.toFixed(0)} | ${loopDelay.p99Ms.toFixed(0)} / ${loopDelay.maxMs.toFixed(0)} | ${sent} |${bad}`;
}

async function main(): Promise<void> {
  console.log(
    `# bench/hostile-bodies.ts: ${seconds}s idle and ${seconds}s loaded per engine, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}`,
  );
  const rows: string[] = [];
  for (const engine of engines) rows.push(await measure(engine));
  console.log(
    '| engine | /v1/models p90 idle ms | p90 loaded ms | loaded - idle ms | ratio | max loaded ms | event-loop delay p99 / max ms | hostile bodies sent |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
}

if (process.argv.includes('--serve')) void serve(arg('--serve', 'uws') as 'uws' | 'node');
else if (process.argv.includes('--hostile'))
  void hostile(process.argv[process.argv.indexOf('--hostile') + 1]!, process.argv[process.argv.indexOf('--hostile') + 2]!);
else void main();
