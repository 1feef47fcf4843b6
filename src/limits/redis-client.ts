// The one way this gateway opens a Redis connection (rate limits and other shared counters).
//
// ioredis 6 waits forever by default: with Redis paused (SIGSTOP) or killed, calls were still
// pending after 3 s (measured). Everything below exists to turn "hang" into
// "fail fast, recover by itself":
// - commandTimeout: every command rejects after commandTimeoutMs (paused server, lost packets).
// - enableOfflineQueue false: while not connected, commands reject at once instead of queueing.
// - maxRetriesPerRequest 1 and autoResendUnfulfilledCommands false: a command the caller already
//   gave up on is never replayed after a reconnect (a replayed rate-limit take would count a
//   request that was answered 503).
// - socketTimeout: a socket that stops answering while commands are pending is destroyed, so a
//   paused server cannot pile up an unbounded queue of timed-out commands on a live socket.
// - retryStrategy: reconnect forever in the background with a capped back-off, so the gateway
//   recovers within about a second of Redis coming back, without a restart.
import { Redis, type RedisOptions } from 'ioredis';

export interface RedisClientConfig {
  /** redis://[user:pass@]host:port[/db] or rediss:// */
  url: string;
  commandTimeoutMs: number;
  connectTimeoutMs: number;
  /** Prepended by ioredis to every key (including EVAL/EVALSHA KEYS). */
  keyPrefix: string;
  /** Called with connection errors, at most once per outage (default: one stderr line). */
  onError?: (err: Error) => void;
  /** Longest pause between reconnect attempts (default 1000 ms). */
  maxReconnectDelayMs?: number;
}

const MIN_SOCKET_TIMEOUT_MS = 1000;

/** Capped exponential back-off with a little jitter; never gives up (returns a number always). */
export function reconnectDelayMs(attempt: number, maxMs: number): number {
  const base = Math.min(maxMs, 25 * 2 ** Math.min(attempt, 10));
  return base + Math.floor(Math.random() * Math.min(50, base));
}

/** The ioredis options this project runs with; exported so tests can assert them. */
export function redisOptions(cfg: RedisClientConfig): RedisOptions {
  const maxDelayMs = cfg.maxReconnectDelayMs ?? 1000;
  return {
    commandTimeout: cfg.commandTimeoutMs,
    connectTimeout: cfg.connectTimeoutMs,
    // Several command timeouts in a row without a byte from the server: the peer is gone.
    socketTimeout: Math.max(MIN_SOCKET_TIMEOUT_MS, cfg.commandTimeoutMs * 5),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (times: number) => reconnectDelayMs(times, maxDelayMs),
    keyPrefix: cfg.keyPrefix,
    // Connect at construction: the first request should not pay for the handshake, and
    // `ready` tells the start-up code whether Redis is there.
    lazyConnect: false,
    // Scripts and counters do not need RESP3; RESP2 works with every server we may meet.
    protocol: 2,
    connectionName: 'inkgate',
    disableClientInfo: true,
  };
}

/**
 * Opens a client with the timeouts above. The returned client always has an `error` listener
 * (an ioredis client without one prints every reconnect failure to the console).
 */
export function createRedisClient(cfg: RedisClientConfig): Redis {
  const client = new Redis(cfg.url, redisOptions(cfg));
  // One log line per outage, not one per reconnect attempt.
  let reported = false;
  const onError =
    cfg.onError ??
    ((err: Error) => {
      process.stderr.write(`redis: ${redactUrl(cfg.url)} unavailable: ${err.message}\n`);
    });
  client.on('error', (err: Error) => {
    if (reported) return;
    reported = true;
    onError(err);
  });
  client.on('ready', () => {
    reported = false;
  });
  return client;
}

/** Closes the client: QUIT with a short deadline, then a hard disconnect. Never hangs. */
export async function closeRedisClient(client: Redis, timeoutMs = 500): Promise<void> {
  if (client.status === 'end') return;
  if (client.status !== 'ready') {
    client.disconnect();
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.quit(),
      new Promise((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      }),
    ]);
  } catch {
    // QUIT failed: the hard disconnect below is all that is left to do.
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/** The URL without its password, for log lines. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<invalid redis url>';
  }
}
