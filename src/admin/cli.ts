// `inkgate <command>`: the operator's tool. It talks to the same database as the gateway.
// Every command prints a human line or, with --json, one JSON document; errors are one line and exit 1.
import {
  createAccount,
  createKey,
  listKeys,
  listPlans,
  revokeKey,
  setAccountPlan,
  setKeyLimit,
  updateKey,
  AdminError,
  type KeyChanges,
} from '../accounts/accounts.js';
import { isUsageFrame, USAGE_FRAME_CHOICES, type UsageFrame } from '../accounts/usage-frame.js';
import { loadCatalog } from '../catalog/models.js';
import { loadConfig, type Config } from '../config/config.js';
import { LANES, pauseModel, resumeModel, setApiOpen, setLane, type Lane } from '../deployment/state.js';
import { Ledger } from '../ledger/ledger.js';
import { openDatabase } from '../store/connect.js';
import { migrate, migrateAll } from '../store/migrate.js';
import { createPool } from '../store/pool.js';
import type { AdminCommand, AdminContext } from './command.js';
import { ledgerCommands } from './ledger-commands.js';
import { parseArgs as nodeParseArgs } from 'node:util';
import { consoleCommands } from './console-command.js';
import { mediaCommands } from './media-command.js';

export interface ParsedArgs {
  flags: Record<string, string | true>;
  positional: string[];
}

/** Flags every command takes, none with a value. */
const GLOBAL_FLAGS: Readonly<Record<string, 'boolean'>> = Object.freeze({ json: 'boolean', help: 'boolean' });

/**
 * The flags a command takes, read from its usage line: `--name N` (or `[--name N]`) takes a value,
 * `--name` followed by another flag, a bracket or nothing is a switch. The usage line is what the
 * operator reads, so what it shows is exactly what is accepted.
 */
export function flagsOfUsage(usage: string): Record<string, 'string' | 'boolean'> {
  const raw = usage.split(/\s+/);
  const words = raw.map((w) => w.replace(/^\[+|\]+$/g, ''));
  const out: Record<string, 'string' | 'boolean'> = { ...GLOBAL_FLAGS };
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (!w.startsWith('--')) continue;
    const next = words[i + 1];
    const closed = raw[i]!.endsWith(']');
    const takesValue = !closed && next !== undefined && next !== '' && !next.startsWith('--') && !raw[i + 1]!.startsWith('[');
    out[w.slice(2)] = takesValue ? 'string' : 'boolean';
  }
  return out;
}

/**
 * Parses argv against the flags a command declares (node's parseArgs, strict): an unknown flag
 * (a typo such as --ink-limt) and a flag that takes a value but has none (a bare --ink-limit, or
 * one followed by another flag) are refused, so a mistyped cap can never create a key without one.
 * A flag given twice is refused too: which one wins would be a guess.
 */
export function parseArgs(argv: string[], flags: Readonly<Record<string, 'string' | 'boolean'>> = GLOBAL_FLAGS): ParsedArgs {
  const options: Record<string, { type: 'string' | 'boolean' }> = {};
  for (const [k, type] of Object.entries(flags)) options[k] = { type };
  let parsed;
  try {
    parsed = nodeParseArgs({ args: argv, options, strict: true, allowPositionals: true, tokens: true });
  } catch (e) {
    throw new AdminError(cliMessage(e));
  }
  const seen = new Set<string>();
  for (const tok of parsed.tokens) {
    if (tok.kind !== 'option') continue;
    if (seen.has(tok.name)) throw new AdminError(`--${tok.name} is given twice`);
    seen.add(tok.name);
  }
  const out: Record<string, string | true> = Object.create(null) as Record<string, string | true>;
  for (const [k, v] of Object.entries(parsed.values)) {
    if (v === true || typeof v === 'string') out[k] = v;
  }
  return { flags: out, positional: parsed.positionals };
}

/** node's parse errors name the flag in a long sentence; the operator gets one short line. */
function cliMessage(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  const code = (e as { code?: string }).code;
  const flag = /'(-{1,2}[^' ]+)/.exec(msg)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown flag ${flag ?? msg}; run inkgate help`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    if (/ambiguous/.test(msg)) return `${flag ?? 'a flag'} needs a value (a value starting with - is written ${flag ?? '--flag'}=-...)`;
    if (/argument missing/.test(msg)) return `${flag ?? 'a flag'} needs a value`;
    return `${flag ?? 'a flag'} takes no value`;
  }
  return msg.split('\n')[0]!;
}

/** The command words: the leading words before the first flag (global switches may come first). */
function commandWords(argv: string[]): string[] {
  const words: string[] = [];
  for (const a of argv) {
    if (a === '--json' || a === '--help') continue;
    if (a.startsWith('-')) break;
    words.push(a);
  }
  return words;
}

const need = (args: ParsedArgs, name: string): string => {
  const v = args.flags[name];
  if (typeof v !== 'string' || v === '') throw new AdminError(`--${name} is required`);
  return v;
};
const wholeInk = (v: string, name: string): number => {
  if (!/^\d{1,15}$/.test(v)) throw new AdminError(`--${name} must be a whole number of Ink`);
  return Number(v);
};

/** A usage frame flag's value, checked before anything is written. */
const usageFrameFlag = (v: string): UsageFrame => {
  if (!isUsageFrame(v)) throw new AdminError(`--usage-frame must be ${USAGE_FRAME_CHOICES}, not ${JSON.stringify(v)}`);
  return v;
};

/** `key set`'s changes: only the flags given; at least one. */
function keyChanges(a: ParsedArgs): KeyChanges {
  const lim = a.flags['ink-limit'];
  const frame = a.flags['usage-frame'];
  if (typeof lim !== 'string' && typeof frame !== 'string') throw new AdminError('key set needs --ink-limit or --usage-frame');
  return {
    ...(typeof lim === 'string' ? { inkLimit: lim === 'none' ? null : wholeInk(lim, 'ink-limit') } : {}),
    ...(typeof frame === 'string' ? { usageFrame: usageFrameFlag(frame) } : {}),
  };
}

const lane = (v: string | undefined): Lane => {
  if (!v || !(LANES as readonly string[]).includes(v)) throw new AdminError(`lane must be one of ${LANES.join(', ')}`);
  return v as Lane;
};

const coreCommands: Record<string, AdminCommand> = {
  migrate: {
    usage: 'migrate',
    summary: 'apply pending database migrations, then changed SQL function files',
    run: async (_a, ctx) => migrateAll(ctx.pool, ctx.config.db.schema),
  },
  'plan list': {
    usage: 'plan list',
    summary: 'list plans (video allowed, daily cap, period grant)',
    run: async (_a, ctx) => listPlans(ctx.pool),
  },
  'account create': {
    usage: 'account create --name N --plan P',
    summary: 'create an account with an empty wallet; prints its usr_ id',
    run: async (a, ctx) => {
      const acc = await createAccount(ctx.pool, { name: need(a, 'name'), planId: need(a, 'plan') });
      return { id: acc.id };
    },
  },
  'account set-plan': {
    usage: 'account set-plan --account A --plan P',
    summary: "change an account's plan",
    run: async (a, ctx) => {
      await setAccountPlan(ctx.pool, need(a, 'account'), need(a, 'plan'));
      return { ok: true };
    },
  },
  'key create': {
    usage: 'key create --account A --name N [--ink-limit N] [--expires ISO] [--usage-frame event|comment|none]',
    summary: 'create a key; prints the raw key once (--usage-frame: how its streams carry the usage frame, default event)',
    run: async (a, ctx) => {
      const lim = a.flags['ink-limit'];
      const exp = a.flags.expires;
      const frame = a.flags['usage-frame'];
      const usageFrame = typeof frame === 'string' ? usageFrameFlag(frame) : undefined;
      let expiresAt: Date | null = null;
      if (typeof exp === 'string') {
        expiresAt = new Date(exp);
        if (Number.isNaN(expiresAt.getTime())) throw new AdminError('--expires must be an ISO 8601 timestamp');
      }
      return createKey(ctx.pool, {
        accountId: need(a, 'account'),
        name: need(a, 'name'),
        inkLimit: typeof lim === 'string' ? wholeInk(lim, 'ink-limit') : null,
        expiresAt,
        usageFrame,
      });
    },
  },
  'key list': {
    usage: 'key list [--account A]',
    summary: 'list keys (prefix and last four only)',
    run: async (a, ctx) => listKeys(ctx.pool, typeof a.flags.account === 'string' ? a.flags.account : undefined),
  },
  'key revoke': {
    usage: 'key revoke KEY_ID',
    summary: 'refuse the key from the next request on',
    run: async (a, ctx) => {
      const id = a.positional[0];
      if (id === undefined) throw new AdminError('KEY_ID is required');
      await revokeKey(ctx.pool, id);
      return { id, revoked: true };
    },
  },
  'key set-limit': {
    usage: 'key set-limit KEY_ID --ink-limit N|none',
    summary: "edit a key's lifetime Ink cap",
    run: async (a, ctx) => {
      const id = a.positional[0];
      if (id === undefined) throw new AdminError('KEY_ID is required');
      const v = need(a, 'ink-limit');
      const limit = v === 'none' ? null : wholeInk(v, 'ink-limit');
      await setKeyLimit(ctx.pool, id, limit);
      return { id, ink_limit: limit };
    },
  },
  'key set': {
    usage: 'key set KEY_ID [--ink-limit N|none] [--usage-frame event|comment|none]',
    summary: "edit a key's settings: its lifetime Ink cap, how its streams carry the usage frame (one change, all or nothing)",
    run: async (a, ctx) => {
      const id = a.positional[0];
      if (id === undefined) throw new AdminError('KEY_ID is required');
      const changes = keyChanges(a);
      await updateKey(ctx.pool, id, changes);
      return {
        id,
        ...(changes.inkLimit !== undefined ? { ink_limit: changes.inkLimit } : {}),
        ...(changes.usageFrame !== undefined ? { usage_frame: changes.usageFrame } : {}),
      };
    },
  },
  'model pause': {
    usage: 'model pause MODEL_ID [--retry-after S]',
    summary: 'mark a model unavailable; submits answer 503 with Retry-After',
    run: async (a, ctx) => {
      const id = ctx.catalog().resolveId(a.positional[0] ?? '');
      if (!id) throw new AdminError(`unknown model ${JSON.stringify(a.positional[0] ?? '')}`);
      const ra = typeof a.flags['retry-after'] === 'string' ? Number(a.flags['retry-after']) : 300;
      if (!Number.isInteger(ra) || ra < 1 || ra > 86400) throw new AdminError('--retry-after must be 1 to 86400 seconds');
      await pauseModel(ctx.pool, id, ra);
      return { model: id, paused: true, retry_after_s: ra };
    },
  },
  'model resume': {
    usage: 'model resume MODEL_ID',
    summary: 'put a paused model back on sale',
    run: async (a, ctx) => {
      const id = ctx.catalog().resolveId(a.positional[0] ?? '');
      if (!id) throw new AdminError(`unknown model ${JSON.stringify(a.positional[0] ?? '')}`);
      await resumeModel(ctx.pool, id);
      return { model: id, paused: false };
    },
  },
  'lane enable': {
    usage: 'lane enable messages|responses|video|images',
    summary: 'open a lane (text lanes: after vendor certification)',
    run: async (a, ctx) => {
      const l = lane(a.positional[0]);
      await setLane(ctx.pool, l, true);
      return { lane: l, enabled: true };
    },
  },
  'lane disable': {
    usage: 'lane disable messages|responses|video|images',
    summary: 'close a lane: cards show available: false, calls answer 503',
    run: async (a, ctx) => {
      const l = lane(a.positional[0]);
      await setLane(ctx.pool, l, false);
      return { lane: l, enabled: false };
    },
  },
  'api open': {
    usage: 'api open',
    summary: 'open the /v1 API on this deployment',
    run: async (_a, ctx) => {
      await setApiOpen(ctx.pool, true);
      return { api_open: true };
    },
  },
  'api close': {
    usage: 'api close',
    summary: 'close the API: every /v1 path answers 404 external_api_disabled',
    run: async (_a, ctx) => {
      await setApiOpen(ctx.pool, false);
      return { api_open: false };
    },
  },
};

export const commands: Readonly<Record<string, AdminCommand>> = Object.freeze({ ...coreCommands, ...ledgerCommands, ...consoleCommands, ...mediaCommands });

function usage(): string {
  const rows = Object.values(commands).map((c) => `  inkgate ${c.usage}\n      ${c.summary}`);
  rows.push('  inkgate bench [--help]\n      measure what a gateway adds over its vendor (latency, throughput, CPU, memory; see docs/bench.md)');
  return `usage: inkgate <command> [--json]\n\n${rows.join('\n')}\n`;
}

/** Finds the longest command name that prefixes the positional words. */
function findCommand(words: string[]): { name: string; rest: string[] } | undefined {
  for (const n of [2, 1]) {
    const name = words.slice(0, n).join(' ');
    if (commands[name]) return { name, rest: words.slice(n) };
  }
  return undefined;
}

function human(v: unknown): string {
  if (Array.isArray(v)) return v.map((r) => human(r)).join('\n') || '(none)';
  if (v && typeof v === 'object') {
    return Object.entries(v)
      .map(([k, x]) => `${k}: ${x instanceof Date ? x.toISOString() : typeof x === 'object' && x !== null ? JSON.stringify(x) : String(x)}`)
      .join('  ');
  }
  return String(v);
}

export async function runCli(
  argv: string[],
  out: (s: string) => unknown = (s) => process.stdout.write(s),
  err: (s: string) => unknown = (s) => process.stderr.write(s),
  config?: Config,
): Promise<number> {
  // The bench measures targets, not the database: it never opens the operator's (src/bench).
  if (argv[0] === 'bench') return (await import('../bench/cli.js')).runBench(argv.slice(1), out, err);
  const found = findCommand(commandWords(argv));
  let args: ParsedArgs;
  try {
    args = parseArgs(argv, found ? flagsOfUsage(commands[found.name]!.usage) : GLOBAL_FLAGS);
  } catch (e) {
    err(`inkgate: ${(e as Error).message}\n`);
    return 1;
  }
  const json = args.flags.json === true;
  if (args.positional.length === 0 || args.flags.help === true || args.positional[0] === 'help') {
    out(found && args.flags.help === true ? `usage: inkgate ${commands[found.name]!.usage}\n      ${commands[found.name]!.summary}\n` : usage());
    return args.positional.length === 0 && args.flags.help !== true ? 1 : 0;
  }
  if (!found) {
    err(`inkgate: unknown command ${JSON.stringify(args.positional.join(' '))}; run inkgate help\n`);
    return 1;
  }
  const rest = args.positional.slice(found.name.split(' ').length);
  const cfg = config ?? loadConfig();
  let db;
  try {
    db = await openDatabase(cfg, { share: false, log: () => undefined });
  } catch (e) {
    err(`inkgate: cannot reach the database: ${(e as Error).message.split('\n')[0]}\n`);
    return 1;
  }
  const pool = createPool({ ...cfg.db, url: db.url, poolMax: 4 });
  const ledger = new Ledger(pool);
  try {
    if (found.name !== 'migrate') await migrate(pool, cfg.db.schema);
    let catalog: ReturnType<typeof loadCatalog> | undefined;
    const ctx: AdminContext = { pool, ledger, config: cfg, catalog: () => (catalog ??= loadCatalog()) };
    const command = commands[found.name]!;
    const result = await command.run({ flags: args.flags, positional: rest }, ctx);
    out(json ? JSON.stringify(result, null, 2) + '\n' : human(result) + '\n');
    return command.exitCode?.(result) ?? 0;
  } catch (e) {
    const msg = e instanceof Error ? e.message.split('\n')[0] : String(e);
    if (json) out(JSON.stringify({ error: msg }) + '\n');
    err(`inkgate: ${msg}\n`);
    return 1;
  } finally {
    await ledger.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await db.stop();
  }
}
