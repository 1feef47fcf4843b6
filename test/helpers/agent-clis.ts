// The coding agents the agent tests drive, installed from the npm registry at pinned versions into a
// cache outside the repository (~/.cache/inkgate/agents/<pkg>@<version>). They are test tools, not
// dependencies a user installs, so nothing about them is in package.json. The install runs under an
// flock(1) lock (a kernel lock: released when its holder dies, so a killed test never leaves a stale
// one), into a temporary folder renamed into place only once the binary answers `--version`, so a
// half-finished install never looks done. A failed install throws with npm's output: a test that
// needs the agent fails loudly instead of skipping.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

export interface AgentCli {
  readonly pkg: string;
  readonly version: string;
  /** The command in node_modules/.bin. */
  readonly bin: string;
}

/** Pinned: the suite proves these exact versions work through the gateway. */
export const AGENT_CLIS = {
  'claude-code': { pkg: '@anthropic-ai/claude-code', version: '2.1.332', bin: 'claude' },
  codex: { pkg: '@openai/codex', version: '0.171.0', bin: 'codex' },
  opencode: { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode' },
} as const satisfies Record<string, AgentCli>;

export type AgentName = keyof typeof AGENT_CLIS;

/** An install of ~400 MB (about 10 s here): generous for a slow link, but bounded. */
export const INSTALL_TIMEOUT_MS = 5 * 60_000;
/** Waiting for another test process's install of the same package. */
const LOCK_WAIT_S = INSTALL_TIMEOUT_MS / 1000 + 60;
const VERSION_TIMEOUT_MS = 60_000;
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

export const agentCacheRoot = (): string => join(homedir(), '.cache', 'inkgate', 'agents');

const dirOf = (cli: AgentCli): string => join(agentCacheRoot(), `${cli.pkg.replace('/', '+')}@${cli.version}`);
const binOf = (dir: string, cli: AgentCli): string => join(dir, 'node_modules', '.bin', cli.bin);

/** npm and node from the running node's folder first, the way test/run.js sets PATH for children. */
function toolPath(): string {
  return `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`;
}

function versionOf(binary: string): { ok: boolean; text: string } {
  const r = spawnSync(binary, ['--version'], { encoding: 'utf8', timeout: VERSION_TIMEOUT_MS, env: { PATH: toolPath(), HOME: homedir() } });
  return { ok: r.status === 0, text: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}`.trim() };
}

/**
 * Runs in a child under the lock: checks again (another process may have finished while this one
 * waited), installs into a temporary folder (npm under timeout(1), so a hung install ends with its
 * children), proves the binary runs, renames the folder into place (over a broken one).
 */
const INSTALL_SCRIPT = `
set -eu
[ -x "$FINAL/node_modules/.bin/$BIN" ] && exit 0
rm -rf "$STAGE"
mkdir -p "$STAGE"
cd "$STAGE"
timeout -k 5 "$INSTALL_S" npm install --prefix "$STAGE" --no-save --no-audit --no-fund --loglevel=error --fetch-retries=5 "$SPEC"
"$STAGE/node_modules/.bin/$BIN" --version >/dev/null
rm -rf "$FINAL"
mv "$STAGE" "$FINAL"
`;

/**
 * The agent's binary, installed first when the cache lacks it. A failed install is tried once more
 * (said on stderr): the registry is a network peer, and a reset connection on a cold cache is not
 * what the agent tests test. Throws when the second try fails too.
 */
export function agentBinary(name: AgentName): string {
  try {
    return installedAgent(name);
  } catch (e) {
    process.stderr.write(`# agent-clis: ${(e as Error).message.split('\n')[0]}; trying the install once more\n`);
    return installedAgent(name);
  }
}

function installedAgent(name: AgentName): string {
  const cli: AgentCli = AGENT_CLIS[name];
  const dir = dirOf(cli);
  const binary = binOf(dir, cli);
  if (existsSync(binary)) return binary;
  mkdirSync(agentCacheRoot(), { recursive: true });
  const stage = `${dir}.stage-${process.pid}`;
  const r = spawnSync('flock', ['-w', String(LOCK_WAIT_S), `${dir}.lock`, 'sh', '-c', INSTALL_SCRIPT], {
    encoding: 'utf8',
    timeout: LOCK_WAIT_S * 1000 + INSTALL_TIMEOUT_MS,
    maxBuffer: MAX_OUTPUT_BYTES,
    killSignal: 'SIGKILL',
    env: {
      ...process.env,
      PATH: toolPath(),
      FINAL: dir,
      STAGE: stage,
      BIN: cli.bin,
      SPEC: `${cli.pkg}@${cli.version}`,
      INSTALL_S: String(INSTALL_TIMEOUT_MS / 1000),
    },
  });
  if (r.status !== 0 || !existsSync(binary)) {
    rmSync(stage, { recursive: true, force: true });
    const why = r.error ? String(r.error) : r.signal ? `killed by ${r.signal}` : `exit ${r.status}`;
    throw new Error(`installing ${cli.pkg}@${cli.version} into ${dir} failed (${why}):\n${r.stdout}\n${r.stderr}`);
  }
  const v = versionOf(binary);
  if (!v.ok || !v.text.includes(cli.version)) {
    // A folder whose binary does not run is moved aside so the next run installs afresh.
    renameSync(dir, `${dir}.broken-${process.pid}`);
    throw new Error(`${cli.pkg}@${cli.version} installed but \`${cli.bin} --version\` answered: ${v.text}`);
  }
  return binary;
}
