// Load and soak: mixed traffic against a gateway in its own process on a private
// PostgreSQL and a private redis-server, optionally pausing them; then 10 keys at 100 requests/s
// each against the per-key limit. Loopback only, bounded. Exit status 1 when a goal is missed.
//
//   node --import ./test/loader/register.js test/soak.ts \ (npm run bench:soak --)
//     [--minutes 10] [--pauses] [--rate 60] [--keys 200] [--rate-minutes 2 | --no-rate] [--json]
//
// --pauses: SIGSTOP Redis for 3 s, and separately Postgres for 3 s, each once every two minutes
// (one pause every minute, alternating). The CI variants are test/reliability/soak.test.ts and
// test/reliability/rate-exact.test.ts.
import { formatRate, runRateExact } from './helpers/soak-rate.js';
import { formatSoak, runSoak } from './helpers/soak-run.js';
import { startSoakStack } from './helpers/soak-stack.js';

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  if (i === -1) return dflt;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} needs a positive number`);
  return v;
}

const minutes = arg('--minutes', 10);
const ratePerS = arg('--rate', 60);
// Every key stays well under its 60 per minute: the soak measures the gateway, not the limiter.
const keys = arg('--keys', Math.max(100, Math.ceil((ratePerS * 60) / 30)));
const pauses = process.argv.includes('--pauses');
const rateMinutes = process.argv.includes('--no-rate') ? 0 : arg('--rate-minutes', 2);
const json = process.argv.includes('--json');
const say = (m: string) => {
  if (!json) process.stdout.write(m + '\n');
};

let failed = false;
const result: Record<string, unknown> = { command: process.argv.slice(1).join(' ') };

const stack = await startSoakStack({ keys, log: (m) => say(`# ${m}`) });
try {
  say(`# soak: ${minutes} min at ${ratePerS} req/s, ${keys} keys, pauses ${pauses ? 'on (3 s, Redis and Postgres in turn every 60 s)' : 'off'}`);
  const soak = await runSoak(stack, {
    durationMs: minutes * 60_000,
    ratePerS,
    pauses: pauses ? { everyMs: 60_000, pauseMs: 3_000 } : null,
    sampleEveryMs: 2_000,
    log: say,
  });
  result.soak = soak;
  for (const l of formatSoak(soak)) say(l);
  failed ||= soak.failures.length > 0;
} finally {
  await stack.stop();
}

if (rateMinutes > 0) {
  say(`# rate: 10 keys x 100 req/s for ${rateMinutes} min`);
  const rate = await runRateExact({ keys: 10, perKeyPerS: 100, durationMs: rateMinutes * 60_000, log: say });
  result.rate = rate;
  for (const l of formatRate(rate)) say(l);
  failed ||= rate.failures.length > 0;
}
if (json) process.stdout.write(JSON.stringify(result, null, 1) + '\n');
process.exit(failed ? 1 : 0);
