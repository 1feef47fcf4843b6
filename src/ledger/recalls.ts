// Lease recalls between instances: "give back what you lease on this account" (the edge of a wallet,
// a roll-over) and "... on this key" (a revoke, a cap edit). Redis pub/sub when REDIS_URL is set,
// Postgres LISTEN/NOTIFY otherwise. A message is only a hurry-up: the recall is also written on
// the lease rows (recall_at), and every instance's heartbeat reads it back, so a lost message
// costs at most one heartbeat, never money.
import pg from 'pg';
import { Redis } from 'ioredis';
import { redisOptions, reconnectDelayMs } from '../limits/redis-client.js';
import { BUS_CHANNEL_SQL, busChannel } from '../store/notify.js';

export interface RecallScope {
  readonly accountId?: string;
  readonly keyId?: string;
  /**
   * 'key': the key itself changed (revoked, cap edited): also drop it from authentication caches.
   * 'switch': an operator switch changed (API, lane, model pause): no lease is recalled, every
   * instance re-reads the switches now instead of at its next refresh.
   */
  readonly why: 'edge' | 'key' | 'period' | 'switch';
}

const MAX_MESSAGE_CHARS = 1000;

/** The channel name carries the schema, so test schemas (and deployments sharing a server) never hear each other. */
export const recallChannel = busChannel;

export function encodeRecall(scope: RecallScope): string {
  return JSON.stringify({ a: scope.accountId, k: scope.keyId, w: scope.why });
}

/**
 * The same message sent from SQL, inside the transaction that makes the change: Postgres delivers
 * a NOTIFY only if that transaction commits. `accountIdSql` / `keyIdSql` are SQL expressions (a
 * column or a parameter), or null.
 */
export function recallNotifySql(accountIdSql: string | null, keyIdSql: string | null, why: RecallScope['why']): string {
  const fields = [...(accountIdSql ? [`'a', ${accountIdSql}`] : []), ...(keyIdSql ? [`'k', ${keyIdSql}`] : []), `'w', '${why}'`];
  return `pg_notify(${BUS_CHANNEL_SQL}, json_build_object(${fields.join(', ')})::text)`;
}

export function decodeRecall(text: string): RecallScope | undefined {
  if (text.length > MAX_MESSAGE_CHARS) return undefined;
  try {
    const j = JSON.parse(text) as { a?: unknown; k?: unknown; w?: unknown };
    if (j.w === 'switch') return { why: 'switch' };
    const why = j.w === 'key' || j.w === 'period' ? j.w : 'edge';
    const accountId = typeof j.a === 'string' ? j.a : undefined;
    const keyId = typeof j.k === 'string' ? j.k : undefined;
    if (accountId === undefined && keyId === undefined) return undefined;
    return { accountId, keyId, why };
  } catch {
    return undefined;
  }
}

export interface RecallBus {
  readonly kind: 'redis' | 'postgres';
  publish(scope: RecallScope): Promise<void>;
  close(): Promise<void>;
}

export interface RecallBusOptions {
  readonly dbUrl: string;
  readonly dbSchema: string;
  readonly connectTimeoutMs: number;
  readonly redis: { url: string | null; commandTimeoutMs: number; connectTimeoutMs: number; keyPrefix: string };
  /** Called for every recall heard (also this instance's own). */
  readonly onRecall: (scope: RecallScope) => void;
  readonly onError?: (error: Error) => void;
  /** Where a Postgres bus sends its NOTIFYs: the instance's pool. */
  readonly publishVia: { query(text: string, values: unknown[]): Promise<unknown> };
}

/**
 * The buses an instance listens on. Recalls between instances go over Redis when it is configured,
 * else Postgres. Changes made by an operator (revoke, cap edit, roll-over) always arrive over
 * Postgres: their NOTIFY is sent in the transaction that makes the change and delivered only if it
 * commits, which no Redis message can promise. With Redis, an instance therefore listens on both.
 */
export function createRecallBus(options: RecallBusOptions): RecallBus {
  if (!options.redis.url) return new PostgresRecallBus(options);
  const redis = new RedisRecallBus(options);
  const pg = new PostgresRecallBus(options);
  return {
    kind: 'redis',
    publish: (s) => redis.publish(s),
    close: async () => {
      await Promise.all([redis.close(), pg.close()]);
    },
  };
}

class PostgresRecallBus implements RecallBus {
  readonly kind = 'postgres' as const;
  private client: pg.Client | undefined;
  private closed = false;
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly channel: string;

  constructor(private readonly options: RecallBusOptions) {
    this.channel = recallChannel(options.dbSchema);
    this.connect();
  }

  private connect(): void {
    if (this.closed) return;
    const c = new pg.Client({
      connectionString: this.options.dbUrl,
      connectionTimeoutMillis: this.options.connectTimeoutMs,
      keepAlive: true,
      application_name: 'inkgate-recalls',
    });
    this.client = c;
    const retry = (error: Error) => {
      this.options.onError?.(error);
      void c.end().catch(() => undefined);
      if (this.client === c) this.client = undefined;
      if (this.closed || this.timer) return;
      this.timer = setTimeout(
        () => {
          this.timer = undefined;
          this.connect();
        },
        reconnectDelayMs(this.attempt++, 1000),
      );
      this.timer.unref();
    };
    c.on('error', retry);
    c.on('notification', (notification) => {
      const s = notification.payload === undefined ? undefined : decodeRecall(notification.payload);
      if (s) this.options.onRecall(s);
    });
    c.connect()
      .then(() => c.query(`LISTEN ${this.channel}`))
      .then(() => {
        this.attempt = 0;
      })
      .catch(retry);
  }

  async publish(scope: RecallScope): Promise<void> {
    await this.options.publishVia.query('SELECT pg_notify($1, $2)', [this.channel, encodeRecall(scope)]);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.client?.end().catch(() => undefined);
  }
}

class RedisRecallBus implements RecallBus {
  readonly kind = 'redis' as const;
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly channel: string;

  constructor(options: RecallBusOptions) {
    // The prefix is written into the channel name by hand: ioredis applies keyPrefix to keys, not channels.
    const opts = redisOptions({ ...options.redis, url: options.redis.url!, keyPrefix: '' });
    this.channel = `${options.redis.keyPrefix}${recallChannel(options.dbSchema)}`;
    this.pub = new Redis(options.redis.url!, opts);
    this.pub.on('error', (e: Error) => options.onError?.(e));
    // A subscriber connection only listens. It subscribes on every 'ready' itself: ioredis's own
    // re-subscription leaves its promise unhandled when the connection drops again meanwhile.
    const sub = new Redis(options.redis.url!, { ...opts, autoResubscribe: false, commandTimeout: undefined });
    sub.on('error', (e: Error) => options.onError?.(e));
    sub.on('ready', () => void sub.subscribe(this.channel).catch((e: Error) => options.onError?.(e)));
    sub.on('message', (_ch: string, text: string) => {
      const s = decodeRecall(text);
      if (s) options.onRecall(s);
    });
    this.sub = sub;
  }

  async publish(scope: RecallScope): Promise<void> {
    await this.pub.publish(this.channel, encodeRecall(scope));
  }

  async close(): Promise<void> {
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
