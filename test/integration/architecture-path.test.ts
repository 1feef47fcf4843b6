// docs/architecture.md's walks through one text request and one video job name, per step, the
// files and functions that do it. test/unit/architecture-doc.test.ts checks that each function is
// in its file; this test checks the claims themselves: a real streamed /v1/messages request through
// the gateway, on each engine, and real video jobs run every named function. V8's precise coverage
// (node:inspector, call counts) says which functions ran, in this process, where the gateway runs;
// nothing is replaced or spied on. A named SQL function is checked by what only it writes: the
// request's row written from its lease.
//
// Two requests cover the table: step 5 checks and parses a body of up to 64 KiB on the serving
// thread and a larger one on the worker (whose isolate the coverage does not see), so one of each;
// both through the Redis rate limiter (step 4), to a funded key whose holds come from a lease
// (step 8). The page's engine rows are one per engine: each pass expects its own.
import { readFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import t from 'tap';
import { eachEngine } from '../helpers/engines.js';
import { testRedisUrl } from '../helpers/env.js';
import { startMessagesStack } from '../helpers/messages-stack.js';
import { sharedRedisUrl } from '../helpers/redis-server.js';
import { request } from 'undici';
import { RENDER_MS, runToEnd, startVideoHarness } from './video-harness.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const page = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8');

/** The (file, function) pairs of the steps table under `heading` (the first table after it). */
function namedSteps(heading: string): Array<{ file: string; fn: string }> {
  const at = page.indexOf(`\n${heading}\n`);
  if (at < 0) throw new Error(`docs/architecture.md has no section ${heading}`);
  const section = page.slice(page.indexOf('| Step | File | Function |', at));
  const table = section.slice(0, section.indexOf('\n\n'));
  return [...table.matchAll(/^\|[^|\n]*\| `((?:src)\/[^`]+)` \| `([A-Za-z_$][\w$]*)` \|$/gm)].map((m) => ({ file: m[1]!, fn: m[2]! }));
}

/** The engine rows: each pass expects only its own engine's. */
const ENGINE_FILES: Record<string, string> = { uws: 'src/server/uws-engine.ts', node: 'src/server/node-engine.ts' };
const TEXT_PATH = '## One billed streaming request: `POST /v1/messages` with `stream: true`';
const VIDEO_PATH = '## One video job';

const redisUrl = await sharedRedisUrl(t, testRedisUrl, "the page's step 4 names the Redis rate limiter");

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
t.teardown(async () => {
  await session.post('Profiler.stopPreciseCoverage');
  session.disconnect();
});

/** Which of `steps` did not run, by the coverage `ran` (the SQL ones are checked apart). */
function notRun(steps: ReadonlyArray<{ file: string; fn: string }>, ran: Map<string, Set<string>>, skip: (file: string) => boolean): string[] {
  return steps
    .filter(({ file, fn }) => !file.endsWith('.sql') && !skip(file) && !ran.get(pathToFileURL(join(root, file)).href)?.has(fn))
    .map((s) => `${s.fn} (${s.file})`);
}

/** Functions that ran since the last call (taking the coverage resets its counts), by file URL. */
async function ranSinceLast(): Promise<Map<string, Set<string>>> {
  const { result } = await session.post('Profiler.takePreciseCoverage');
  const ran = new Map<string, Set<string>>();
  for (const script of result) {
    const names = ran.get(script.url) ?? new Set<string>();
    for (const f of script.functions) if (f.ranges[0]!.count > 0) names.add(f.functionName);
    ran.set(script.url, names);
  }
  return ran;
}

eachEngine('every function the architecture page names for a text request runs on that request', async (t, engine) => {
  const steps = namedSteps(TEXT_PATH);
  t.ok(steps.length >= 25, `the page names ${steps.length} functions on the path`);
  await ranSinceLast(); // counts from here on: the gateway's start-up is part of the path (factories)
  const { g, k, client } = await startMessagesStack(t, { engine, config: { redis: { url: redisUrl } } });
  for (const prompt of ['Hello there', 'word '.repeat(16 * 1024)]) {
    // The second, 80 KiB of body, is checked and parsed on the worker.
    const stream = client.messages.stream({ model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: prompt }] });
    const final = await stream.finalMessage();
    t.equal(final.stop_reason, 'end_turn', `a request of ${prompt.length} prompt characters streamed to its end`);
  }
  t.equal((await g.call('GET', '/v1/me', { key: k.key })).status, 200, '/v1/me (it writes the journal first)');
  const ran = await ranSinceLast();

  // The other engine's row: its own pass checks it.
  const otherEngine = (file: string) => Object.entries(ENGINE_FILES).some(([name, f]) => f === file && name !== engine);
  t.same(notRun(steps, ran, otherEngine), [], `every one of the ${steps.length} step functions ran`);
  t.ok(ran.get(pathToFileURL(join(root, ENGINE_FILES[engine]!)).href)?.size, `the ${engine} engine served it`);

  // The SQL steps: the requests' rows were written from their lease, which only ledger_flush does.
  const rows = await g.db.pool.query(`SELECT lease_id, leased, hold_state FROM requests WHERE account_id = $1`, [k.accountId]);
  t.equal(rows.rows.length, 2, 'two request rows');
  for (const r of rows.rows) t.ok(r.lease_id !== null && r.leased === false && r.hold_state === 'settled', 'written and settled from its lease (ledger_flush)');
  for (const { file, fn } of steps.filter((s) => s.file.endsWith('.sql'))) {
    const p = await g.db.pool.query(`SELECT 1 FROM pg_proc WHERE proname = $1 AND pronamespace = to_regnamespace(current_schema())`, [fn]);
    t.equal(p.rows.length, 1, `${fn} (${file}) is the schema's`);
  }
});

t.test('every function the architecture page names for a video job runs on its jobs', async (t) => {
  const steps = namedSteps(VIDEO_PATH);
  t.ok(steps.length >= 15, `the page names ${steps.length} functions on the path`);
  await ranSinceLast();
  // The whole table: a job that succeeds (submitted with an idempotency key, its result stored and
  // downloaded through its signed link), one the vendor fails (refunded), then the retention sweep.
  const h = await startVideoHarness(t);
  const { key } = await h.funded(1_000);
  const ok = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'a red fox in snow' }, { 'Idempotency-Key': 'architecture-path-1' });
  t.equal(ok.status, 202, 'submitted');
  const done = await runToEnd(h, key, ok.json.id);
  t.equal(done.status, 'succeeded');
  const download = await request(done.video.url);
  await download.body.arrayBuffer();
  t.equal(download.statusCode, 200, 'downloaded through its signed link');
  const bad = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x [[sim:fail]]' });
  t.equal((await runToEnd(h, key, bad.json.id)).status, 'failed', 'the vendor failed the other');
  h.advance(8 * 86_400_000 + RENDER_MS);
  t.ok((await h.engine.sweep()).expired >= 1, 'the sweep expired the result');
  const ran = await ranSinceLast();
  t.same(
    notRun(steps, ran, () => false),
    [],
    `every one of the ${steps.length} step functions ran`,
  );
});
