// A real gateway on 127.0.0.1:0 over a fresh Postgres schema, with helpers to make accounts and keys.
import type { Test } from 'tap';
import { request, type Dispatcher } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/gateway.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb, type TestDb } from './db.js';
import { testRedisUrl } from './env.js';

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

export async function startTestGateway(
  t: Test,
  overrides: DeepPartial<Config> = {},
  opts: GatewayOptions & { redis?: boolean } = {},
): Promise<TestGateway> {
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
  t.teardown(() => gw.close());
  const tg: TestGateway = {
    gw,
    url: gw.url,
    db,
    config,
    async newKey(o = {}) {
      const acc = await createAccount(db.pool, { name: 'test', planId: o.plan ?? 'pro' });
      const k = await createKey(db.pool, { accountId: acc.id, name: o.name ?? 'test key', inkLimit: o.inkLimit ?? null });
      return { accountId: acc.id, keyId: k.id, key: k.key };
    },
    call: (method, path, o = {}) => call(gw.url, method, path, o),
  };
  return tg;
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
