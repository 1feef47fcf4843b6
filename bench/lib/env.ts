// Which Postgres a bench uses: DATABASE_URL, else the machine's 127.0.0.1:5432/test, else embedded.
import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../../src/store/embedded.js';

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.setTimeout(500, () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(false));
    s.once('connect', () => (s.destroy(), resolve(true)));
  });
}

export async function benchDatabaseUrl(): Promise<{ url: string; kind: string; stop: () => Promise<void> }> {
  const env = process.env.DATABASE_URL;
  if (env) return { url: env, kind: 'DATABASE_URL', stop: async () => undefined };
  if (await answers(5432)) return { url: 'postgres://postgres@127.0.0.1:5432/test', kind: 'PostgreSQL 127.0.0.1:5432', stop: async () => undefined };
  const h = await startEmbeddedPostgres(mkdtempSync(join(tmpdir(), 'inkgate-bench-')), () => undefined);
  return { url: h.url, kind: 'embedded PostgreSQL', stop: h.stop };
}
