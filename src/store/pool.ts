// The Postgres pool: the source of truth for money, keys and jobs.
// Every peer that can hang has a timeout: a paused or dead Postgres must answer within a second,
// so the pool bounds connecting, each query (client side) and each statement and lock (server side).
import pg from 'pg';
import { ApiError } from '../errors.js';

export interface DbConfig {
  readonly url: string;
  readonly schema: string;
  readonly poolMax: number;
  readonly connectionTimeoutMs: number;
  readonly queryTimeoutMs: number;
  readonly lockTimeoutMs: number;
  readonly statementTimeoutMs: number;
}

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

// BIGINT (int8) comes back as a string by default; our amounts are whole Ink far below 2^53,
// so parse them as numbers, and fail loudly rather than lose precision.
pg.types.setTypeParser(20, (text: string) => {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`int8 out of safe range: ${text}`);
  return n;
});

export function createPool(cfg: DbConfig): Pool {
  // Server-side limits ride on the startup packet, so they hold from the first statement on
  // and need no extra round trip per connection.
  const options = [
    `-c search_path=${cfg.schema},public`,
    `-c lock_timeout=${cfg.lockTimeoutMs}`,
    `-c statement_timeout=${cfg.statementTimeoutMs}`,
    `-c idle_in_transaction_session_timeout=${Math.max(cfg.statementTimeoutMs * 2, 10_000)}`,
  ].join(' ');
  const pool = new pg.Pool({
    connectionString: cfg.url,
    max: cfg.poolMax,
    connectionTimeoutMillis: cfg.connectionTimeoutMs,
    query_timeout: cfg.queryTimeoutMs,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    options,
    application_name: 'inkgate',
  });
  // An idle client's socket error must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  return pool;
}

const UNAVAILABLE_SQLSTATES = new Set([
  '55P03', // lock_not_available (lock_timeout)
  '57014', // query_canceled (statement_timeout)
  '57P01',
  '57P02',
  '57P03', // admin shutdown, crash shutdown, cannot connect now
  '53300', // too_many_connections
  '08000',
  '08003',
  '08006',
  '08001',
  '08004', // connection exceptions
  '40001',
  '40P01', // serialization failure, deadlock: retryable
]);

/** True when the error means "the store could not answer now", not "the statement is wrong". */
export function isStoreUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && UNAVAILABLE_SQLSTATES.has(code)) return true;
  if (typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EHOSTUNREACH)$/.test(code)) return true;
  const m = err.message;
  return (
    m.includes('Query read timeout') ||
    m.includes('timeout exceeded when trying to connect') ||
    m.includes('Connection terminated') ||
    m.includes('connection timeout') ||
    m.includes('Client has encountered a connection error')
  );
}

/** Maps store outages to the documented 503 (docs/api/errors.md) (admission could not be completed); rethrows the rest. */
export function storeError(err: unknown): never {
  if (isStoreUnavailable(err)) {
    throw new ApiError('provider_unavailable', {
      message: 'Admission could not be completed: the ledger store is unavailable. Retry after Retry-After.',
      retryAfterS: 2,
      cause: err,
    });
  }
  throw err;
}

/**
 * True when a statement may have committed although we got no answer (read timeout, connection
 * dropped after sending). A server-side error (a SQLSTATE) means it rolled back; a failure to
 * connect means it was never sent.
 */
export function outcomeUnknown(err: unknown): boolean {
  if (!isStoreUnavailable(err)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return false;
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH') return false;
  const m = (err as Error).message;
  if (m.includes('trying to connect') || m.includes('connection timeout')) return false;
  return true;
}

/**
 * Runs `run` inside one transaction on one connection, then `check` on its result before COMMIT (the
 * ledger's postconditions: a broken one rolls the move back). A failed `run` or `check` is rolled back
 * before the error goes on. A store that stopped answering (a timeout, a dropped connection) gets
 * no ROLLBACK to wait for: the connection is destroyed instead, which ends the transaction on the
 * server just the same, so an outage is answered within one query timeout.
 */
export async function withTx<T>(pool: Pool, run: (client: PoolClient) => Promise<T>, check?: (out: T) => void): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN');
    const out = await run(client);
    check?.(out);
    await client.query('COMMIT');
    return out;
  } catch (e) {
    broken = outcomeUnknown(e); // no answer: a timeout or a dropped connection (a SQLSTATE means the session is healthy)
    if (!broken) {
      try {
        await client.query('ROLLBACK');
      } catch {
        broken = true; // the connection is gone or wedged: do not return it to the pool
      }
    }
    throw e;
  } finally {
    client.release(broken);
  }
}
