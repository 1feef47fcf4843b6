// Text-lane bench (issues 4 and 5): what inkgate adds over the vendor called directly, and against
// a plain node:http + undici pass-through proxy (no auth, no billing), in the same run.
//   node --import ./node_modules/@tapjs/typescript/dist/esm/import.mjs bench/text-lanes.ts [--seconds 5] [--lane messages|responses|both] [--paced 1000] [--json]
// Processes: the vendor simulators run in one child, inkgate (billing on: every request reserves
// and settles in Postgres) and the plain proxy in another; the load generator runs here. Each child
// reports its CPU time so the table shows CPU per request of the proxy process.
import { fork, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { percentile, runLoad, type LoadResult } from './lib/load.js';
import { startBillingGateway } from './lib/billing-gateway.js';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : dflt);
const seconds = Number(arg('--seconds', '5'));
const laneArg = arg('--lane', 'both');
const paced = Number(arg('--paced', '1000'));
const asJson = process.argv.includes('--json');
const role = arg('--role', 'main');

// ------------------------------------------------------------------------------------------------
// child: the simulators
async function runSims(): Promise<void> {
  const { startAnthropicSimulator } = await import('../src/vendors/anthropic/simulator.js');
  const { startOpenAISimulator } = await import('../src/vendors/openai/simulator.js');
  const a = await startAnthropicSimulator({ apiKey: 'sk-ant-bench', maxRecordedRequests: 0 });
  const o = await startOpenAISimulator({ apiKey: 'sk-oai-bench', maxRecordedRequests: 0 });
  process.send!({ anthropic: a.url, openai: o.url });
  process.on('message', () => void Promise.all([a.close(), o.close()]).then(() => process.exit(0)));
}

// child: inkgate and the plain proxy
async function runProxies(): Promise<void> {
  const sims = JSON.parse(arg('--sims', '{}')) as { anthropic: string; openai: string };
  const stack = await startBillingGateway(sims, 'bench_text');
  const gw = stack.gw;

  // The plain proxy: node:http in, undici out, bytes piped both ways, no auth and no billing.
  const upstreams = new Map<string, Pool>();
  const route = (url: string): { pool: Pool; path: string; headers: Record<string, string> } => {
    if (url.startsWith('/v1/messages')) {
      const u = new URL(sims.anthropic);
      if (!upstreams.has('a')) upstreams.set('a', new Pool(u.origin, { connections: 256 }));
      return { pool: upstreams.get('a')!, path: '/v1/messages', headers: { 'x-api-key': 'sk-ant-bench', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' } };
    }
    const u = new URL(sims.openai);
    if (!upstreams.has('o')) upstreams.set('o', new Pool(u.origin, { connections: 256 }));
    return { pool: upstreams.get('o')!, path: u.pathname.replace(/\/$/, '') + '/responses', headers: { authorization: 'Bearer sk-oai-bench', 'content-type': 'application/json' } };
  };
  const plain = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const r = route(req.url ?? '');
      try {
        const up = await r.pool.request({ path: r.path, method: 'POST', headers: r.headers, body: Buffer.concat(chunks) });
        res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
        up.body.pipe(res);
      } catch {
        res.writeHead(502).end();
      }
    });
  });
  await new Promise<void>((r) => plain.listen(0, '127.0.0.1', () => r()));
  let cpu = process.cpuUsage();
  process.send!({ gateway: gw.url, plain: `http://127.0.0.1:${(plain.address() as { port: number }).port}`, key: stack.key, db: stack.dbKind });
  process.on('message', async (m: string) => {
    if (m === 'cpu') {
      const d = process.cpuUsage(cpu);
      cpu = process.cpuUsage();
      const mem = process.memoryUsage().rss;
      process.send!({ cpuUs: d.user + d.system, rss: mem });
      return;
    }
    plain.close();
    await stack.stop();
    process.exit(0);
  });
}

// ------------------------------------------------------------------------------------------------
// main: the load
function child(rolename: string, extra: string[] = []): ChildProcess {
  return fork(fileURLToPath(import.meta.url), ['--role', rolename, ...extra], { execArgv: process.execArgv });
}
const once = <T>(c: ChildProcess): Promise<T> => new Promise((r) => c.once('message', r as never));

interface Target {
  name: 'direct' | 'plain proxy' | 'inkgate';
  base: string;
  path: string;
  headers: Record<string, string>;
}

/** Time to first content delta and to the last byte, at concurrency 1, over `count` streams. */
async function streamLatency(t: Target, body: string, marker: string, count: number): Promise<{ ttftP50: number; ttftP99: number; lastP50: number }> {
  const pool = new Pool(new URL(t.base).origin, { connections: 1 });
  const ttft = new Float64Array(count);
  const last = new Float64Array(count);
  for (let i = -20; i < count; i++) {
    const t0 = performance.now();
    const r = await pool.request({ path: t.path, method: 'POST', headers: t.headers, body });
    let first = 0;
    for await (const c of r.body) {
      if (first === 0 && (c as Buffer).includes(marker)) first = performance.now() - t0;
    }
    if (i >= 0) {
      ttft[i] = first;
      last[i] = performance.now() - t0;
    }
  }
  await pool.close();
  ttft.sort();
  last.sort();
  return { ttftP50: percentile(ttft, 50), ttftP99: percentile(ttft, 99), lastP50: percentile(last, 50) };
}

async function main(): Promise<void> {
  const simsP = child('sims');
  const sims = await once<{ anthropic: string; openai: string }>(simsP);
  const proxP = child('proxies', ['--sims', JSON.stringify(sims)]);
  const prox = await once<{ gateway: string; plain: string; key: string; db: string }>(proxP);
  const cpu = async () => {
    proxP.send('cpu');
    return once<{ cpuUs: number; rss: number }>(proxP);
  };
  const lanes = laneArg === 'both' ? ['messages', 'responses'] : [laneArg];
  const report: Record<string, unknown>[] = [];
  console.log(`# bench/text-lanes.ts: ${seconds}s per load run, ${prox.db}, in-process limiter, billing on, Node ${process.version}`);
  for (const lane of lanes) {
    const isMsg = lane === 'messages';
    const simBase = isMsg ? sims.anthropic : sims.openai;
    const simPath = isMsg ? '/v1/messages' : new URL(sims.openai).pathname.replace(/\/$/, '') + '/responses';
    const body = isMsg
      ? JSON.stringify({ model: 'sonnet', max_tokens: 256, messages: [{ role: 'user', content: 'Benchmark prompt of modest size.' }] })
      : JSON.stringify({ model: 'astra', max_output_tokens: 256, input: 'Benchmark prompt of modest size.' });
    const vendorBody = isMsg ? body.replace('"sonnet"', '"claude-sonnet-5"') : body.replace('"astra"', '"gpt-6"');
    const streamBody = body.replace(/^\{/, '{"stream":true,');
    const vendorStreamBody = vendorBody.replace(/^\{/, '{"stream":true,');
    const marker = isMsg ? 'content_block_delta' : 'response.output_text.delta';
    const json = { 'content-type': 'application/json' };
    const targets: Array<Target & { body: string; sbody: string }> = [
      {
        name: 'direct',
        base: simBase,
        path: simPath,
        headers: isMsg ? { ...json, 'x-api-key': 'sk-ant-bench', 'anthropic-version': '2023-06-01' } : { ...json, authorization: 'Bearer sk-oai-bench' },
        body: vendorBody,
        sbody: vendorStreamBody,
      },
      { name: 'plain proxy', base: prox.plain, path: isMsg ? '/v1/messages' : '/v1/responses', headers: json, body: vendorBody, sbody: vendorStreamBody },
      { name: 'inkgate', base: prox.gateway, path: isMsg ? '/v1/messages' : '/v1/responses', headers: { ...json, authorization: `Bearer ${prox.key}` }, body, sbody: streamBody },
    ];
    const rows: Record<string, Record<string, number>> = {};
    for (const t of targets) {
      const c1 = await runLoad({ label: t.name, url: t.base, path: t.path, method: 'POST', headers: t.headers, body: t.body, connections: 1, durationMs: seconds * 1000, warmupMs: 500 });
      const s = await streamLatency(t, t.sbody, marker, 400);
      await cpu();
      const sat = await runLoad({ label: t.name, url: t.base, path: t.path, method: 'POST', headers: t.headers, body: t.body, connections: 50, durationMs: seconds * 1000, warmupMs: 500 });
      const used = await cpu();
      const nonOk = Object.entries(sat.statuses).filter(([k]) => k !== '200').reduce((n, [, v]) => n + v, 0) + sat.errors;
      rows[t.name] = {
        c1P50: c1.p50Ms, c1P99: c1.p99Ms, ttftP50: s.ttftP50, ttftP99: s.ttftP99, lastP50: s.lastP50,
        satRps: sat.rps, satP50: sat.p50Ms, satP99: sat.p99Ms, nonOk,
        // CPU of the proxy process per saturated request (meaningless for 'direct', which skips it).
        cpuUsPerReq: t.name === 'direct' ? NaN : used.cpuUs / Math.max(1, sat.requests), rssMb: used.rss / 1048576,
      };
    }
    const d = rows.direct!;
    const p = rows['plain proxy']!;
    const g = rows.inkgate!;
    report.push({ lane, rows });
    if (asJson) continue;
    console.log(`\n## ${lane}`);
    console.log('| target | c=1 p50 ms | c=1 p99 ms | TTFT p50 ms | TTFT p99 ms | stream end p50 ms | c=50 req/s | c=50 p99 ms | CPU µs/req | non-200 |');
    console.log('|---|---|---|---|---|---|---|---|---|---|');
    for (const [name, r] of Object.entries(rows)) {
      console.log(`| ${name} | ${r.c1P50!.toFixed(3)} | ${r.c1P99!.toFixed(3)} | ${r.ttftP50!.toFixed(3)} | ${r.ttftP99!.toFixed(3)} | ${r.lastP50!.toFixed(3)} | ${r.satRps!.toFixed(0)} | ${r.satP99!.toFixed(2)} | ${Number.isNaN(r.cpuUsPerReq!) ? '-' : r.cpuUsPerReq!.toFixed(0)} | ${r.nonOk} |`);
    }
    console.log(
      `added vs direct: c=1 p50 +${(g.c1P50! - d.c1P50!).toFixed(3)} ms (plain proxy +${(p.c1P50! - d.c1P50!).toFixed(3)}), p99 +${(g.c1P99! - d.c1P99!).toFixed(3)} ms; ` +
        `TTFT p50 +${(g.ttftP50! - d.ttftP50!).toFixed(3)} ms; saturation ${(g.satRps! / p.satRps!).toFixed(2)}x plain proxy, ${(g.satRps! / d.satRps!).toFixed(2)}x direct`,
    );
  }
  // N paced streams at once (Messages): throughput and tail vs direct, the gateway's RSS, stalls.
  if (paced > 0) {
    const pace = 20;
    const tokens = 50;
    const body = (model: string) =>
      JSON.stringify({ model, max_tokens: 256, stream: true, messages: [{ role: 'user', content: `paced [[sim:pace=${pace}]] [[sim:tokens=${tokens}]]` }] });
    const json = { 'content-type': 'application/json' };
    const runPaced = async (base: string, headers: Record<string, string>, b: string) => {
      const pool = new Pool(new URL(base).origin, { connections: paced });
      const durations = new Float64Array(paced);
      let maxGapMs = 0;
      let failures = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: paced }, async (_, i) => {
          const s0 = performance.now();
          try {
            const r = await pool.request({ path: '/v1/messages', method: 'POST', headers, body: b });
            if (r.statusCode !== 200) failures++;
            let last = performance.now();
            for await (const _c of r.body) {
              const now = performance.now();
              maxGapMs = Math.max(maxGapMs, now - last);
              last = now;
            }
          } catch {
            failures++;
          }
          durations[i] = performance.now() - s0;
        }),
      );
      const wall = performance.now() - t0;
      await pool.close();
      durations.sort();
      return { wallMs: wall, p50: percentile(durations, 50), p99: percentile(durations, 99), maxGapMs, failures, streamsPerS: paced / (wall / 1000) };
    };
    const direct = await runPaced(sims.anthropic, { ...json, 'x-api-key': 'sk-ant-bench', 'anthropic-version': '2023-06-01' }, body('claude-sonnet-5'));
    await cpu();
    const ink = await runPaced(prox.gateway, { ...json, authorization: `Bearer ${prox.key}` }, body('sonnet'));
    const used = await cpu();
    const row = { paced, paceMs: pace, tokens, direct, inkgate: ink, gatewayRssMb: used.rss / 1048576 };
    report.push({ pacedStreams: row });
    if (!asJson) {
      console.log(`\n## ${paced} paced streams at once (messages, ${tokens} deltas every ${pace} ms)`);
      console.log('| target | streams/s | stream p50 ms | stream p99 ms | max gap between chunks ms | failures |');
      console.log('|---|---|---|---|---|---|');
      for (const [name, r] of [['direct', direct], ['inkgate', ink]] as const) {
        console.log(`| ${name} | ${r.streamsPerS.toFixed(0)} | ${r.p50.toFixed(1)} | ${r.p99.toFixed(1)} | ${r.maxGapMs.toFixed(1)} | ${r.failures} |`);
      }
      console.log(`throughput ${(ink.streamsPerS / direct.streamsPerS).toFixed(2)}x direct, p99 ${(ink.p99 / direct.p99).toFixed(2)}x direct, gateway RSS ${row.gatewayRssMb.toFixed(0)} MB`);
    }
  }
  if (asJson) console.log(JSON.stringify(report, null, 2));
  proxP.send('stop');
  simsP.send('stop');
}

if (role === 'sims') void runSims();
else if (role === 'proxies') void runProxies();
else void main();
export type { LoadResult };
