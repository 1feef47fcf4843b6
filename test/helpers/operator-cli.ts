// The operator's CLI two ways: in-process against a test schema (`inkgate ... --json`, and a key made
// the way an operator makes one: account, top-up, key), and as the real process an operator or a
// cron job runs (`node bin/inkgate.js ...`), whose exit status is what scripts see.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import { runCli } from '../../src/admin/cli.js';
import type { Config } from '../../src/config/config.js';

export interface OperatorCli {
  cli(...argv: string[]): Promise<any>;
  operatorKey(name: string, usd: number): Promise<{ accountId: string; keyId: string; key: string }>;
}

export function operatorCli(config: Config): OperatorCli {
  const cli = async (...argv: string[]): Promise<any> => {
    let out = '';
    let err = '';
    const code = await runCli(
      [...argv, '--json'],
      (s) => void (out += s),
      (s) => void (err += s),
      config,
    );
    if (code !== 0) throw new Error(`inkgate ${argv.join(' ')}: ${err}`);
    return JSON.parse(out);
  };
  return {
    cli,
    async operatorKey(name, usd) {
      const acc = await cli('account', 'create', '--name', name, '--plan', 'pro');
      await cli('topup', '--account', acc.id, '--usd', String(usd));
      const k = await cli('key', 'create', '--account', acc.id, '--name', name);
      return { accountId: acc.id, keyId: k.id, key: k.key };
    },
  };
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The shipped entry point: it runs dist/ (test/run.js builds it before any test runs). */
export const INKGATE_BIN = join(root, 'bin', 'inkgate.js');
/** A spawned command that has not ended by then is killed and reported: a hang is a failure, not a wait. */
const CLI_TIMEOUT_MS = 60_000;

export interface CliProcessResult {
  /** The exit status; null when a signal ended the process. */
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * The environment a spawned `inkgate` gets: this process's, without any inkgate setting or database
 * URL of its own (so nothing reaches the child by accident), plus `settings`.
 */
export function cliEnvironment(settings: Readonly<Record<string, string>>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('INKGATE_') && !k.startsWith('AWS_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL') env[k] = v;
  }
  return { ...env, ...settings };
}

/**
 * The settings that point a spawned `inkgate` at a test schema: DATABASE_URL, and the schema in an
 * INKGATE_CONFIG file (the schema has no variable of its own), and a data dir of its own; all in a
 * temporary directory removed at the end of the test.
 */
export function schemaSettings(t: Test, db: { url: string; schema: string }): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-cli-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify({ db: { schema: db.schema } }));
  return { DATABASE_URL: db.url, INKGATE_CONFIG: file, INKGATE_DATA_DIR: join(dir, 'var') };
}

/** Runs `node bin/inkgate.js ...argv` to its end; resolves with its status and everything it wrote. */
export function spawnCli(env: NodeJS.ProcessEnv, argv: readonly string[], cwd: string = root): Promise<CliProcessResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [INKGATE_BIN, ...argv], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`inkgate ${argv.join(' ')} did not end within ${CLI_TIMEOUT_MS} ms; stderr: ${stderr}`));
    }, CLI_TIMEOUT_MS);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}
