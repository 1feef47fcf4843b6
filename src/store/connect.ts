// Finding the database: DATABASE_URL when set; otherwise the embedded PostgreSQL in the data dir.
// The gateway that starts the embedded cluster records its address in $INKGATE_DATA_DIR/embedded-pg.json
// so the admin CLI reaches the same cluster while the gateway runs, and starts it itself when not.
// Only the gateway and `inkgate migrate` may create the embedded cluster: any other admin command
// without DATABASE_URL and without a cluster in the data dir is pointed at the wrong place, and an
// empty new database would answer it with nothing instead of an error.
import { existsSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/config.js';
import { startEmbeddedPostgres, type EmbeddedLog } from './embedded.js';

export interface Database {
  readonly url: string;
  /** 'external' (DATABASE_URL), 'embedded' (started here) or 'embedded-shared' (a running gateway's). */
  readonly kind: 'external' | 'embedded' | 'embedded-shared';
  stop(): Promise<void>;
}

const recordFile = (cfg: Config) => join(cfg.dataDir, 'embedded-pg.json');

/** Whether the data dir holds an initialised embedded cluster (startEmbeddedPostgres keeps it in pg/). */
export const embeddedDatabaseExists = (cfg: Config): boolean => existsSync(join(cfg.dataDir, 'pg', 'PG_VERSION'));

/** No DATABASE_URL and no embedded database where INKGATE_DATA_DIR points: nothing was created. */
export class DatabaseNotFound extends Error {
  constructor(cfg: Config) {
    super(
      `no database: DATABASE_URL is not set and INKGATE_DATA_DIR (${cfg.dataDir}) holds no embedded database; ` +
        'set DATABASE_URL or INKGATE_DATA_DIR as the gateway has them (inkgate migrate creates a new one)',
    );
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The running gateway's record of its embedded cluster, when that gateway is alive. */
function liveRecord(cfg: Config): { url: string; pid: number } | undefined {
  try {
    const rec = JSON.parse(readFileSync(recordFile(cfg), 'utf8')) as { url: string; pid: number };
    if (typeof rec.url === 'string' && Number.isInteger(rec.pid) && rec.pid !== process.pid && alive(rec.pid)) return rec;
  } catch {
    /* no record, or not one of ours */
  }
  return undefined;
}

/**
 * `share`: this is the gateway, which owns the cluster and records its address for the CLI.
 * `mayCreate: false` (admin commands other than migrate): throws DatabaseNotFound, touching nothing,
 * when neither DATABASE_URL nor a live gateway's cluster nor an initialised one in the data dir exists.
 */
export async function openDatabase(cfg: Config, opts: { share: boolean; log: EmbeddedLog; mayCreate?: boolean }): Promise<Database> {
  if (cfg.db.url !== null) return { url: cfg.db.url, kind: 'external', stop: async () => undefined };
  const running = liveRecord(cfg);
  if (!opts.share && running) return { url: running.url, kind: 'embedded-shared', stop: async () => undefined };
  // A second gateway on the same data dir would take the first one's cluster for an orphan and stop it.
  if (opts.share && running) {
    throw new Error(`another inkgate (pid ${running.pid}) serves the data dir ${cfg.dataDir}: stop it first, or give this one its own INKGATE_DATA_DIR`);
  }
  if (opts.mayCreate === false && !embeddedDatabaseExists(cfg)) throw new DatabaseNotFound(cfg);
  const h = await startEmbeddedPostgres(cfg.dataDir, opts.log);
  if (opts.share) {
    try {
      mkdirSync(cfg.dataDir, { recursive: true });
      writeFileSync(recordFile(cfg), JSON.stringify({ url: h.url, pid: process.pid }), { mode: 0o600 });
    } catch (e) {
      // The caller gets no handle to stop the cluster with: it must not outlive this failure.
      await h.stop();
      throw e;
    }
  }
  return {
    url: h.url,
    kind: 'embedded',
    stop: async () => {
      if (opts.share) rmSync(recordFile(cfg), { force: true });
      await h.stop();
    },
  };
}
