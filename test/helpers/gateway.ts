// A real gateway on 127.0.0.1:0 over a fresh Postgres schema, with helpers to make accounts and keys.
import type { Test } from 'tap';
import { request, type Dispatcher } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/gateway.js';
import { isStoreUnavailable } from '../../src/store/pool.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb, type TestDb } from './db.js';
import { testRedisUrl } from './env.js';
import { boundedTeardown } from './teardown.js';

/** A gateway's close waits up to its 30 s drain for requests still running, then ends its pools. */
const GATEWAY_CLOSE_MS = 45_000;

export interface TestGateway {
  readonly gw: Gateway;
  readonly url: string;
  readonly db: TestDb;
  readonly config: Config;
  /** A fresh account on `plan` with one key; returns the raw key. */
  newKey(opts?: { plan?: string; inkLimit?: number | null; name?: string }): Promise<{ accountId: string; keyId: string; key: string }>;
  /** HTTP request to the gateway; body objects are sent as JSON. */
  call(method: string, path: string, opts?: { key?: string; body?: unknown; headers?: Record<string, string> }): Promise<Reply>;
}

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: any;
}

export async function startTestGateway(t: Test, overrides: DeepPartial<Config> = {}, opts: GatewayOptions & { redis?: boolean } = {}): Promise<TestGateway> {
  const db = await testDb(t);
  const config = loadConfig(
    {},
    {
      ...overrides,
      server: { port: 0, host: '127.0.0.1', ...(overrides.server ?? {}) },
      db: { ...(overrides.db ?? {}), url: db.url, schema: db.schema },
      redis: { ...(overrides.redis ?? {}), url: opts.redis === false ? null : (overrides.redis?.url ?? null) },
    },
  );
  const gw = await createGateway(config, { log: silentLogger, skipMigrate: true, ...opts });
  boundedTeardown(t, 'gateway close', () => gw.close(), GATEWAY_CLOSE_MS);
  const tg: TestGateway = {
    gw,
    url: gw.url,
    db,
    config,
    newKey: (o = {}) =>
      setUp('newKey', async () => {
        const acc = await createAccount(db.pool, { name: 'test', planId: o.plan ?? 'pro' });
        const k = await createKey(db.pool, { accountId: acc.id, name: o.name ?? 'test key', inkLimit: o.inkLimit ?? null });
        return { accountId: acc.id, keyId: k.id, key: k.key };
      }),
    call: (method, path, o = {}) => call(gw.url, method, path, o),
  };
  return tg;
}

/** Attempts a set-up step gets when the store does not answer in time. */
const SET_UP_ATTEMPTS = 3;

/**
 * Runs a set-up step (making accounts, keys, switching lanes) on the test's pool (seconds of
 * timeouts; the lock timeout is the hot path's). A set-up is not the behaviour under test: when the
 * machine's Postgres is slow to commit (another file's bulk writes hold the WAL, seen as
 * LWLock:WALWrite and IO waits, which no lock_timeout covers), the step is tried again, and after
 * SET_UP_ATTEMPTS it fails with a message saying it was the set-up. Retrying may leave an extra
 * account behind when a timed-out commit did land: harmless, every step makes fresh rows.
 */
export async function setUp<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      // The ledger maps an outage to its 503 ApiError and keeps the store's error as the cause.
      if (!isStoreUnavailable(e) && !isStoreUnavailable((e as Error | undefined)?.cause)) throw e;
      if (attempt >= SET_UP_ATTEMPTS) {
        throw new Error(`set-up step ${what}: the store did not answer in time ${SET_UP_ATTEMPTS} times (last: ${(e as Error).message})`, { cause: e });
      }
    }
  }
}

/**
 * An account on the pro plan with one key and `ink` of pay-as-you-go Ink, made straight in the store
 * (for tests whose gateway runs on a database of their own).
 */
export async function fundedKey(gw: Gateway, name: string, ink: number): Promise<{ accountId: string; keyId: string; key: string }> {
  const pool = gw.services.pool;
  const acc = await createAccount(pool, { name, planId: 'pro' });
  const k = await createKey(pool, { accountId: acc.id, name: `${name} key` });
  await gw.services.ledger.topUp(acc.id, ink, name);
  return { accountId: acc.id, keyId: k.id, key: k.key };
}

export async function call(
  base: string,
  method: string,
  path: string,
  o: { key?: string; body?: unknown; headers?: Record<string, string>; dispatcher?: Dispatcher } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  if (o.key !== undefined) headers.authorization = `Bearer ${o.key}`;
  let body: string | Buffer | undefined;
  if (o.body !== undefined) {
    body = typeof o.body === 'string' || Buffer.isBuffer(o.body) ? o.body : JSON.stringify(o.body);
    if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
  }
  const r = await request(base + path, { method: method as Dispatcher.HttpMethod, headers, body, dispatcher: o.dispatcher });
  const text = await r.body.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.statusCode, headers: r.headers as Reply['headers'], text, json };
}

export { testRedisUrl };

/**
 * A request record as Postgres has it once the gateway's write-behind journal is written (the
 * text lanes answer from memory and write their records a flush later).
 */
export async function writtenRequest(g: { gw: Gateway }, requestId: string) {
  await g.gw.services.escrow.beforeView();
  return g.gw.services.ledger.getRequest(requestId);
}

/** Waits until the gateway's journal is written: what a reader on another connection then sees is final. */
export async function journalWritten(g: { gw: Gateway }): Promise<void> {
  await g.gw.services.escrow.beforeView();
}
