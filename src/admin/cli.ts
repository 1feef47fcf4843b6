// `inkgate <command>`: the operator's tool. It talks to the same database as the gateway.
// Every command prints a human line or, with --json, one JSON document. Exit status: 0 done, 1 the
// command failed (said in one line, or with --json as {"error":{...}} on stdout), 2 a usage error.
import { loadCatalog } from '../catalog/models.js';
import { loadConfig, type Config } from '../config/config.js';
import { Ledger } from '../ledger/ledger.js';
import { DatabaseNotFound, embeddedDatabaseExists, openDatabase, type Database } from '../store/connect.js';
import { migrate } from '../store/migrate.js';
import { createPool } from '../store/pool.js';
import { checkAgainstUsage, commandWords, flagsOfUsage, GLOBAL_FLAGS, parseArgs, type ParsedArgs } from './args.js';
import { UsageError, type AdminCommand, type AdminContext } from './command.js';
import { consoleCommands } from './console-command.js';
import { coreCommands } from './core-commands.js';
import { ledgerCommands } from './ledger-commands.js';
import { mediaCommands } from './media-command.js';
import { vendorCommands } from './vendor-command.js';

export { flagsOfUsage, parseArgs, type ParsedArgs } from './args.js';

export const commands: Readonly<Record<string, AdminCommand>> = Object.freeze({
  ...coreCommands,
  ...ledgerCommands,
  ...consoleCommands,
  ...mediaCommands,
  ...vendorCommands,
});

/** The exit statuses (docs/admin-cli.md#exit-status). */
export const EXIT = Object.freeze({ ok: 0, failed: 1, usage: 2 });

/** The `code` of a --json error, by what went wrong. */
type ErrorCode = 'usage_error' | 'configuration_error' | 'database_not_found' | 'database_unreachable' | 'command_failed';

function usage(): string {
  const rows = Object.values(commands).map((c) => `  inkgate ${c.usage}\n      ${c.summary}`);
  rows.push('  inkgate bench [--help]\n      measure what a gateway adds over its vendor (latency, throughput, CPU, memory; see docs/bench.md)');
  return `usage: inkgate <command> [--json]\n\n${rows.join('\n')}\n\nexit status: 0 done, 1 the command failed, 2 a usage error\n`;
}

/** Finds the longest command name that prefixes the positional words. */
function findCommand(words: string[]): string | undefined {
  for (const n of [2, 1]) {
    const name = words.slice(0, n).join(' ');
    if (commands[name]) return name;
  }
  return undefined;
}

function human(value: unknown): string {
  if (Array.isArray(value)) return value.map((r) => human(r)).join('\n') || '(none)';
  if (value && typeof value === 'object') {
    return Object.entries(value)
      .map(([k, x]) => `${k}: ${x instanceof Date ? x.toISOString() : typeof x === 'object' && x !== null ? JSON.stringify(x) : String(x)}`)
      .join('  ');
  }
  return String(value);
}

interface Io {
  out: (text: string) => unknown;
  err: (text: string) => unknown;
  json: boolean;
}

/** Reports a failure once (a line on stderr, or the JSON error on stdout) and gives its exit status. */
function fail(output: Io, code: ErrorCode, message: string): number {
  const line = message.split('\n')[0]!;
  if (output.json) output.out(JSON.stringify({ error: { code, message: line } }) + '\n');
  else output.err(`inkgate: ${line}\n`);
  return code === 'usage_error' ? EXIT.usage : EXIT.failed;
}

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** What the command line asks for: help (printed here), or one command with its arguments checked. */
type Plan = { help: string } | { name: string; args: ParsedArgs };

function plan(argv: string[]): Plan {
  const name = findCommand(commandWords(argv));
  const args = parseArgs(argv, name ? flagsOfUsage(commands[name]!.usage) : GLOBAL_FLAGS);
  const wantsHelp = args.flags.help === true || args.positional[0] === 'help';
  if (wantsHelp && name && args.flags.help === true) return { help: `usage: inkgate ${commands[name]!.usage}\n      ${commands[name]!.summary}\n` };
  if (wantsHelp) return { help: usage() };
  if (args.positional.length === 0) throw new UsageError('no command given; run inkgate help');
  if (!name) throw new UsageError(`unknown command ${JSON.stringify(args.positional.join(' '))}; run inkgate help`);
  checkAgainstUsage(commands[name]!.usage, name.split(' ').length, args);
  return { name, args };
}

export async function runCli(
  argv: string[],
  out: (text: string) => unknown = (s) => process.stdout.write(s),
  err: (text: string) => unknown = (s) => process.stderr.write(s),
  config?: Config,
): Promise<number> {
  // The bench measures targets, not the database: it never opens the operator's (bench/tool).
  if (argv[0] === 'bench') return (await import('../../bench/tool/cli.js')).runBench(argv.slice(1), out, err);
  // Known before parsing, so even a refused command line is answered in JSON when --json was asked.
  const io: Io = { out, err, json: argv.includes('--json') };
  let p: Plan;
  try {
    p = plan(argv);
  } catch (e) {
    return fail(io, e instanceof UsageError ? 'usage_error' : 'command_failed', messageOf(e));
  }
  if ('help' in p) {
    out(p.help);
    return EXIT.ok;
  }
  let cfg: Config;
  try {
    cfg = config ?? loadConfig();
  } catch (e) {
    return fail(
      io,
      'configuration_error',
      messageOf(e)
        .replace(/:\n\s*/, ': ')
        .replace(/\n\s*/g, '; '),
    );
  }
  const command = commands[p.name]!;
  if (command.createsDatabase && cfg.db.url === null && !embeddedDatabaseExists(cfg)) {
    err(`inkgate: no DATABASE_URL and no embedded database in INKGATE_DATA_DIR (${cfg.dataDir}): creating one there\n`);
  }
  let db: Database;
  try {
    db = await openDatabase(cfg, { share: false, log: () => undefined, mayCreate: command.createsDatabase === true });
  } catch (e) {
    if (e instanceof DatabaseNotFound) return fail(io, 'database_not_found', e.message);
    return fail(io, 'database_unreachable', `cannot reach the database: ${messageOf(e)}`);
  }
  try {
    return await runCommand(p.name, p.args, cfg, db, io);
  } finally {
    await db.stop();
  }
}

/**
 * An operator's command waits for the database longer than a request does (the configured limits
 * are the hot path's, under a second): a switch's NOTIFY queues behind every other committing
 * NOTIFY in the database, and a busy gateway's lock wait of half a second made `inkgate lane
 * enable` fail where waiting a moment would have done it. Still bounded: a stuck database fails the
 * command, it never hangs a script.
 */
type DbLimits = Pick<Config['db'], 'connectionTimeoutMs' | 'queryTimeoutMs' | 'lockTimeoutMs' | 'statementTimeoutMs'>;
const CLI_DB_LIMITS_MS: DbLimits = { connectionTimeoutMs: 10_000, queryTimeoutMs: 120_000, lockTimeoutMs: 15_000, statementTimeoutMs: 120_000 };

/** The pool limits a command runs with: the configured ones, or the CLI's own where those are longer. */
function cliDbLimits(dbConfig: Config['db']): DbLimits {
  const out = { ...CLI_DB_LIMITS_MS };
  for (const k of Object.keys(out) as (keyof DbLimits)[]) out[k] = Math.max(dbConfig[k], out[k]);
  return out;
}

/** Runs one command on an open database and prints its result; closes what it opened. */
async function runCommand(name: string, args: ParsedArgs, cfg: Config, database: Database, output: Io): Promise<number> {
  const pool = createPool({ ...cfg.db, ...cliDbLimits(cfg.db), url: database.url, poolMax: 4 });
  const ledger = new Ledger(pool);
  try {
    // A database that does not answer is told apart from a command that failed on it.
    const reached = await pool.query('SELECT 1').then(
      () => true,
      (e: unknown) => e,
    );
    if (reached !== true) return fail(output, 'database_unreachable', `cannot reach the database: ${messageOf(reached)}`);
    if (name !== 'migrate') await migrate(pool, cfg.db.schema);
    let catalog: ReturnType<typeof loadCatalog> | undefined;
    const ctx: AdminContext = {
      pool,
      ledger,
      config: cfg,
      catalog: () => (catalog ??= loadCatalog()),
      note: (line) => output.err(`inkgate: ${line}\n`),
    };
    const command = commands[name]!;
    const result = await command.run({ flags: args.flags, positional: args.positional.slice(name.split(' ').length) }, ctx);
    output.out(output.json ? JSON.stringify(result, null, 2) + '\n' : human(result) + '\n');
    const failure = command.failure?.(result);
    if (failure === undefined) return EXIT.ok;
    // The result above already says it all in JSON; a human reader gets the one line too.
    if (!output.json) output.err(`inkgate: ${failure}\n`);
    return EXIT.failed;
  } catch (e) {
    return fail(output, e instanceof UsageError ? 'usage_error' : 'command_failed', messageOf(e));
  } finally {
    await ledger.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
  }
}
