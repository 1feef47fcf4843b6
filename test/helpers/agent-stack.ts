// What the agent tests share: a real gateway with both text lanes open over the Anthropic and
// OpenAI simulators, a funded key, a header tap in front of the gateway (so a test sees exactly
// what a real client sent and what it was answered), a refusing proxy every agent gets as its
// HTTP(S) proxy, a temporary HOME and workspace; a runner that starts an agent in its own process
// group and kills the group on a timeout; and the closing checks (nothing refused, every hold
// settled, the key's charge equal to its request records', the ledger invariant) with the
// diagnostics a reader needs when a client changes what it sends.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator, type AnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator, type OpenAISimulator } from '../../simulators/openai/simulator.js';
import { journalWritten, setUp, startTestGateway, type TestGateway } from './gateway.js';
import { startHeaderTap, type HeaderTap, type TappedRequest } from './header-tap.js';
import { assertLedgerInvariant } from './ledger-invariant.js';
import { startRefusingProxy, type RefusingProxy } from './refusing-proxy.js';
import { boundedTeardown } from './teardown.js';

const ANTHROPIC_VENDOR_KEY = 'sk-ant-agents-vendor';
const OPENAI_VENDOR_KEY = 'sk-openai-agents-vendor';
const WALLET_INK = 1_000_000;
const MAX_OUTPUT_CHARS = 1024 * 1024;
/** How long one agent run may take before its process group is killed and the test fails. */
export const AGENT_RUN_TIMEOUT_MS = 90_000;

export interface AgentStack {
  readonly g: TestGateway;
  readonly anthropic: AnthropicSimulator;
  readonly openai: OpenAISimulator;
  readonly key: { accountId: string; keyId: string; key: string };
  readonly tap: HeaderTap;
  readonly proxy: RefusingProxy;
  /** The gateway as clients reach it (through the tap), without a trailing slash. */
  readonly origin: string;
  /** A temporary home for the agent: its config, state and caches live here. */
  readonly home: string;
  /** The folder the agent works in (its tools run here). */
  readonly workspace: string;
}

/** How long each close of the stack may take; more is a leak, reported as the test's failure. */
const CLOSE_MS = 10_000;
/** Set-up steps, by name, so a failure says where; `fault` lets a test make one of them fail. */
export type AgentStackStep = 'simulators' | 'gateway' | 'lanes' | 'key' | 'tap' | 'proxy' | 'folders';

/**
 * Starts the stack. Everything it starts is closed by a bounded teardown registered as soon as it
 * exists, so a set-up that fails part way (a store that does not answer, say) closes what it made
 * and the test ends at once with the step and the cause, instead of a file that hangs on the
 * handles left open. Each step is bounded by its own timeouts (the pool's, the migration's), not
 * by one over the whole: a set-up abandoned by a timer would go on registering teardowns after
 * the test ended, and those would never run.
 */
export async function startAgentStack(t: Test, o: { fault?: (step: AgentStackStep, g?: TestGateway) => Promise<void> } = {}): Promise<AgentStack> {
  let at: AgentStackStep = 'simulators';
  const step = async (name: AgentStackStep, g?: TestGateway): Promise<void> => {
    at = name;
    await o.fault?.(name, g);
  };
  try {
    return await buildAgentStack(t, step);
  } catch (e) {
    throw new Error(`agent stack set-up failed at step "${at}": ${(e as Error).message}`, { cause: e });
  }
}

async function buildAgentStack(t: Test, step: (name: AgentStackStep, g?: TestGateway) => Promise<void>): Promise<AgentStack> {
  await step('simulators');
  const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_VENDOR_KEY });
  boundedTeardown(t, 'anthropic simulator close', () => anthropic.close(), CLOSE_MS);
  const openai = await startOpenAISimulator({ apiKey: OPENAI_VENDOR_KEY });
  boundedTeardown(t, 'openai simulator close', () => openai.close(), CLOSE_MS);
  await step('gateway');
  const g = await startTestGateway(t, {
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_VENDOR_KEY }, openai: { baseUrl: openai.url, apiKey: OPENAI_VENDOR_KEY } },
  });
  await step('lanes', g);
  await setUp('open the text lanes', async () => {
    await setLane(g.db.pool, 'messages', true);
    await setLane(g.db.pool, 'responses', true);
    await g.gw.services.state.refresh();
  });
  await step('key', g);
  const key = await g.newKey({ name: 'agent key' });
  await setUp('top up the key', () => g.gw.services.ledger.topUp(key.accountId, WALLET_INK, 'agent test'));
  await step('tap', g);
  const tap = await startHeaderTap(g.url);
  boundedTeardown(t, 'header tap close', () => tap.close(), CLOSE_MS);
  await step('proxy', g);
  const proxy = await startRefusingProxy();
  boundedTeardown(t, 'refusing proxy close', () => proxy.close(), CLOSE_MS);
  await step('folders', g);
  const root = mkdtempSync(join(tmpdir(), 'inkgate-agent-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const home = join(root, 'home');
  const workspace = join(root, 'work');
  mkdirSync(home);
  mkdirSync(workspace);
  return { g, anthropic, openai, key, tap, proxy, origin: tap.url().replace(/\/$/, ''), home, workspace };
}

/**
 * The environment every agent runs with: nothing inherited but PATH (no credential of the machine's
 * can leak in), a temporary HOME and XDG folders, the refusing proxy for anything not on loopback.
 */
export function baseAgentEnv(s: AgentStack, extra: Record<string, string>): Record<string, string> {
  const noProxy = '127.0.0.1,localhost,::1';
  return {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    HOME: s.home,
    TMPDIR: tmpdir(),
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    NO_COLOR: '1',
    XDG_CONFIG_HOME: join(s.home, '.config'),
    XDG_DATA_HOME: join(s.home, '.local', 'share'),
    XDG_STATE_HOME: join(s.home, '.local', 'state'),
    XDG_CACHE_HOME: join(s.home, '.cache'),
    HTTPS_PROXY: s.proxy.url,
    HTTP_PROXY: s.proxy.url,
    ALL_PROXY: s.proxy.url,
    https_proxy: s.proxy.url,
    http_proxy: s.proxy.url,
    all_proxy: s.proxy.url,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    ...extra,
  };
}

export interface AgentRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
}

/**
 * Runs `binary args` in `cwd` with no stdin, in a process group of its own; past `timeoutMs` the
 * whole group is killed. Resolves when the process has exited and its output is read.
 */
export function runAgent(binary: string, args: string[], o: { cwd: string; env: Record<string, string>; timeoutMs?: number }): Promise<AgentRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { cwd: o.cwd, env: o.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (d: Buffer) => {
      if (stdout.length < MAX_OUTPUT_CHARS) stdout += d.toString('utf8');
    });
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < MAX_OUTPUT_CHARS) stderr += d.toString('utf8');
    });
    const killGroup = (): void => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // The group is gone already.
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, o.timeoutMs ?? AGENT_RUN_TIMEOUT_MS);
    // A test process that dies mid-run takes the agent's group with it.
    process.once('exit', killGroup);
    child.once('error', (e) => {
      clearTimeout(timer);
      process.removeListener('exit', killGroup);
      reject(e);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      process.removeListener('exit', killGroup);
      // Helpers the agent left behind (language servers, watchers) go with the run.
      killGroup();
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

/** Asserts the run exited 0 in time; on failure the test output carries the agent's stderr and stdout. */
export function assertRunOk(t: Test, label: string, run: AgentRun): boolean {
  const tail = (s: string): string => (s.length > 8_000 ? '…' + s.slice(-8_000) : s);
  const ok = run.code === 0 && !run.timedOut;
  t.ok(ok, `${label}: exited 0 within ${AGENT_RUN_TIMEOUT_MS / 1000} s`, {
    code: run.code,
    signal: run.signal,
    timedOut: run.timedOut,
    ...(ok ? {} : { stderr: tail(run.stderr), stdout: tail(run.stdout) }),
  });
  return ok;
}

const header = (r: TappedRequest, name: string): string | undefined => r.rawHeaders.find(([k]) => k.toLowerCase() === name)?.[1];

function bodyFields(r: TappedRequest): string {
  if (r.body.length === 0) return '';
  try {
    const j: unknown = JSON.parse(r.body.toString('utf8'));
    return j !== null && typeof j === 'object' && !Array.isArray(j) ? Object.keys(j).join(',') : typeof j;
  } catch {
    return `(${r.body.length} bytes, not JSON)`;
  }
}

/**
 * One line per kind of request the client sent, in order: method, path, status, header names, the
 * body's top-level fields; a run of identical lines is written once with its count.
 */
export function describeTraffic(requests: readonly TappedRequest[]): string[] {
  const out: string[] = [];
  let last = '';
  let n = 0;
  const flush = (): void => {
    if (n > 0) out.push(n > 1 ? `${last} (x${n})` : last);
  };
  for (const r of requests) {
    const names = [...new Set(r.rawHeaders.map(([k]) => k.toLowerCase()))].sort().join(',');
    const frame = header(r, 'x-service-usage-frame');
    const line = `${r.method} ${r.path} -> ${r.status} | headers: ${names}${frame ? ` (x-service-usage-frame: ${frame})` : ''} | body: ${bodyFields(r)}`;
    if (line === last) n++;
    else {
      flush();
      last = line;
      n = 1;
    }
  }
  flush();
  return out;
}

/** The parsed JSON bodies of the requests the client sent to `path` (query string ignored). */
export function sentBodies(s: AgentStack, path: string): Array<Record<string, any>> {
  const out: Array<Record<string, any>> = [];
  for (const r of s.tap.requests) {
    if (r.path.split('?')[0] !== path || r.body.length === 0) continue;
    try {
      out.push(JSON.parse(r.body.toString('utf8')));
    } catch {
      // Not JSON: nothing to look at.
    }
  }
  return out;
}

/** A refusal a client is known to recover from by itself (it resends the call without the refused part). */
export interface ExpectedRefusal {
  readonly why: string;
  readonly matches: (r: TappedRequest) => boolean;
  /** At most this many. */
  readonly max: number;
}

/**
 * The closing checks: every request the client sent was answered below 400 (but for `expected`
 * refusals, bounded); the refusing proxy's log is reported; the key holds no Ink, its charge is the
 * sum of its request records' charges (and above zero: something was billed); the ledger invariant
 * holds.
 */
export async function assertCleanSession(t: Test, s: AgentStack, label: string, expected?: ExpectedRefusal): Promise<void> {
  for (const line of describeTraffic(s.tap.requests)) t.comment(`${label} sent: ${line}`);
  const failed = s.tap.requests.filter((r) => r.status === 0 || r.status >= 400);
  const tolerated = expected ? failed.filter((r) => expected.matches(r)) : [];
  const refused = failed.filter((r) => !tolerated.includes(r));
  t.same(
    refused.map((r) => `${r.method} ${r.path} -> ${r.status}: ${r.errorBody}`),
    [],
    `${label}: the gateway refused none of the ${s.tap.requests.length} requests${expected ? ` (besides ${expected.why})` : ''}`,
  );
  if (expected) {
    t.ok(tolerated.length <= expected.max, `${label}: ${tolerated.length} refused as expected (${expected.why}), at most ${expected.max}`);
    for (const r of tolerated) t.comment(`${label}: expected refusal ${r.method} ${r.path} -> ${r.status}: ${r.errorBody}`);
  }
  if (s.proxy.attempts.length > 0) {
    for (const a of s.proxy.attempts) t.comment(`${label} tried to reach (refused by the test proxy): ${a.method} ${a.target}`);
  } else t.comment(`${label}: no attempt reached the refusing proxy`);
  await journalWritten(s.g);
  const pool = s.g.db.pool;
  const k = (await pool.query('SELECT ink_charged, ink_reserved FROM api_keys WHERE id = $1', [s.key.keyId])).rows[0];
  const sum = (await pool.query('SELECT count(*)::int AS n, coalesce(sum(charged_ink), 0)::bigint AS ink FROM requests WHERE key_id = $1', [s.key.keyId]))
    .rows[0];
  t.equal(Number(k.ink_reserved), 0, `${label}: every hold settled (ink_reserved 0)`);
  t.equal(Number(k.ink_charged), Number(sum.ink), `${label}: the key's charge (${k.ink_charged} Ink) is the sum over its ${sum.n} request records`);
  t.ok(Number(k.ink_charged) > 0, `${label}: the session was billed`);
  await assertLedgerInvariant(t, pool);
}
