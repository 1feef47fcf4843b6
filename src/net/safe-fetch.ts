// The one way we fetch a URL a client gave us (frames, references). Every hop is re-validated
// (https, no credentials, public host), the host is resolved and refused if ANY address is not
// public, and the socket is vetted again at connect time: the connect-time lookup classifies the
// address it hands to the socket (so a DNS answer that changed since the first check, i.e. DNS
// rebinding, is refused before a SYN is sent) and the connected socket's remote address is checked
// once more. TLS uses SNI = the URL's host name with normal certificate verification. Bounded
// bytes, bounded total time, manual redirects, no cookies, no auth headers, no shared pool.
import { promises as dns } from 'node:dns';
import { connect as netConnect, isIP, type LookupFunction, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { Agent, request, type buildConnector, type Dispatcher } from 'undici';
import { ApiError } from '../errors.js';
import { classifyAddress, invalidUrlError, sameAddress, urlProblem } from './ssrf-guard.js';

export type Resolver = (host: string) => Promise<string[]>;

export interface SafeFetchOptions {
  /** Field name for errors (`param` of `invalid_url`). Default 'url'. */
  readonly param?: string;
  readonly maxBytes: number;
  /** Whole fetch: every DNS lookup, connect, redirect and the body. */
  readonly timeoutMs: number;
  readonly maxRedirects: number;
  /** Test seam; default: the system resolver (all addresses). */
  readonly resolver?: Resolver;
  /**
   * TEST ONLY: "host:port" pairs exempt from the host and address rules (never from https and
   * no-credentials). There is deliberately no configuration setting that fills this.
   */
  readonly allowList?: ReadonlySet<string>;
  readonly accept?: string;
  readonly method?: 'GET' | 'HEAD';
  /** TEST ONLY: extra trust anchor (PEM) for the local HTTPS test server. */
  readonly ca?: string;
}

export interface SafeFetchResult {
  readonly status: number;
  readonly contentType: string;
  /** The body (GET only). */
  readonly bytes?: Buffer;
  /** Body length (GET), or the declared Content-Length (HEAD; 0 when the server declares none). */
  readonly sizeBytes: number;
  /** The URL that answered, after redirects. */
  readonly finalUrl: string;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS_CAP = 20;
const MAX_TIMEOUT_MS = 10 * 60_000;
const USER_AGENT = 'inkgate-media-fetch/1';

export const systemResolver: Resolver = async (host) => {
  const found = await dns.lookup(host, { all: true, verbatim: false });
  return found.map((a) => a.address);
};

/** Raised inside the connector when the connect-time check refuses an address. */
class BlockedAddressError extends Error {
  constructor(readonly range: string) {
    super(`blocked address (${range})`);
    this.name = 'BlockedAddressError';
  }
}

const bare = (host: string): string => (host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host);
const portOf = (u: URL): number => (u.port === '' ? 443 : Number(u.port));
const hostKey = (u: URL): string => `${bare(u.hostname)}:${portOf(u)}`;

/** First non-public address of the list, or undefined when all are public. */
function firstBlocked(addrs: readonly string[]): string | undefined {
  for (const a of addrs) {
    const c = classifyAddress(a);
    if (c !== 'public') return c;
  }
  return undefined;
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** Drops a response body we will not read. undici's body errors on destroy; nobody is listening. */
function discard(body: { on(event: 'error', listener: () => void): unknown; destroy(): unknown }): void {
  body.on('error', () => undefined);
  body.destroy();
}

function checkOptions(options: SafeFetchOptions): void {
  if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 0) throw new RangeError('safeFetch: maxBytes must be a non-negative integer');
  if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0 || options.timeoutMs > MAX_TIMEOUT_MS)
    throw new RangeError('safeFetch: timeoutMs out of range');
  if (!Number.isInteger(options.maxRedirects) || options.maxRedirects < 0 || options.maxRedirects > MAX_REDIRECTS_CAP)
    throw new RangeError('safeFetch: maxRedirects out of range');
}

function errorCode(error: unknown): string {
  let cur: unknown = error;
  for (let i = 0; i < 4 && cur !== null && typeof cur === 'object'; i++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    cur = (cur as { cause?: unknown }).cause;
  }
  return '';
}

const TLS_CODES = /CERT|SELF_SIGNED|ERR_TLS|ERR_SSL|UNABLE_TO_VERIFY|ALTNAME/;

/**
 * A URL that could not be fetched. The client sees one message whatever went wrong: saying that a
 * name "does not resolve" or "resolves to a blocked address (private)", or which TLS check failed,
 * would let a client map the internal network through the gateway. `detail` says why, for the log.
 */
export class FetchRefusal extends ApiError {
  /** Why, in words for the operator's log; never sent to the client. */
  readonly detail: string;
  /** The HTTP status the server answered, when it answered one we refuse. */
  readonly answeredStatus: number | undefined;

  constructor(param: string, detail: string, opts: { cause?: unknown; answeredStatus?: number } = {}) {
    super('invalid_url', { param, message: `\`${param}\` could not be fetched: it must be a public https URL that answers with the file.`, cause: opts.cause });
    this.detail = detail;
    this.answeredStatus = opts.answeredStatus;
  }
}

/** One call's shared state: its deadline, the sockets to destroy at the end, and why the connector refused. */
interface FetchRun {
  readonly param: string;
  readonly resolver: Resolver;
  readonly allowList: ReadonlySet<string>;
  readonly ctrl: AbortController;
  readonly timer: NodeJS.Timeout;
  timedOut: boolean;
  /** Set by the connector when it refuses an address, so the reason survives undici's wrapping. */
  refusedRange: string | undefined;
  readonly sockets: Set<Socket>;
  readonly fail: (reason: string, cause?: unknown, answeredStatus?: number) => ApiError;
}

function startRun(opts: SafeFetchOptions): FetchRun {
  const param = opts.param ?? 'url';
  const ctrl = new AbortController();
  const run: FetchRun = {
    param,
    resolver: opts.resolver ?? systemResolver,
    allowList: opts.allowList ?? new Set<string>(),
    ctrl,
    timer: setTimeout(() => {
      run.timedOut = true;
      ctrl.abort(new Error('safeFetch timeout'));
    }, opts.timeoutMs),
    timedOut: false,
    refusedRange: undefined,
    sockets: new Set<Socket>(),
    fail: (reason, cause, answeredStatus) => new FetchRefusal(param, reason, { cause, answeredStatus }),
  };
  return run;
}

/**
 * The connect-time check: the address the socket is about to use is resolved here and refused
 * unless public, before any packet is sent. `onDialled` learns the address handed to the socket.
 */
function vettedLookup(run: FetchRun, exempt: boolean, onDialled: (address: string) => void): LookupFunction {
  return (host, lopts, lcb) => {
    const done = lcb as (err: Error | null, address?: unknown, family?: number) => void;
    abortable(run.resolver(host), run.ctrl.signal).then(
      (addrs) => {
        if (addrs.length === 0) return done(Object.assign(new Error(`no address for ${host}`), { code: 'ENOTFOUND' }));
        const blocked = exempt ? undefined : firstBlocked(addrs);
        if (blocked !== undefined) {
          run.refusedRange = blocked;
          return done(new BlockedAddressError(blocked));
        }
        const address = addrs[0]!;
        onDialled(address);
        if (lopts.all === true) done(null, [{ address, family: isIP(address) }]);
        else done(null, address, isIP(address));
      },
      (e: unknown) => done(e instanceof Error ? e : new Error(String(e))),
    );
  };
}

/** The connected socket's check: it must be at the vetted address, and that address public. False: destroyed. */
function vetConnected(run: FetchRun, raw: Socket, dialled: string | undefined, exempt: boolean): boolean {
  const remote = raw.remoteAddress ?? '';
  if (dialled === undefined || !sameAddress(remote, dialled)) {
    run.refusedRange = 'unvetted';
    raw.destroy(new BlockedAddressError('unvetted'));
    return false;
  }
  const c = exempt ? 'public' : classifyAddress(remote);
  if (c !== 'public') {
    run.refusedRange = c;
    raw.destroy(new BlockedAddressError(c));
    return false;
  }
  return true;
}

/** TLS on the vetted socket: SNI and certificate checked against the URL's host name. */
function startTls(run: FetchRun, raw: Socket, hostname: string, caPem: string | undefined, settle: (err: Error | null, sock: Socket | null) => void): void {
  const tlsSocket = tlsConnect({
    socket: raw,
    host: hostname, // the name (or IP) the certificate must carry
    servername: isIP(hostname) === 0 ? hostname : undefined,
    ca: caPem,
    ALPNProtocols: ['http/1.1'],
  });
  run.sockets.add(tlsSocket);
  tlsSocket.once('close', () => run.sockets.delete(tlsSocket));
  tlsSocket.once('secureConnect', () => settle(null, tlsSocket));
  tlsSocket.on('error', (e) => settle(e, null));
}

function createConnector(run: FetchRun, caPem: string | undefined): buildConnector.connector {
  return (options, callback) => {
    const hostname = bare(options.hostname);
    const port = options.port === '' ? 443 : Number(options.port);
    const exempt = run.allowList.has(`${hostname}:${port}`);
    let settled = false;
    const settle = (err: Error | null, sock: Socket | null): void => {
      if (settled) return;
      settled = true;
      if (err !== null) callback(err, null);
      else callback(null, sock!);
    };
    if (options.protocol !== 'https:') return settle(new Error('https only'), null);
    // The address the socket is told to use; the connected socket must be there.
    let dialled: string | undefined = isIP(hostname) === 0 ? undefined : hostname;
    const lookup = vettedLookup(run, exempt, (address) => {
      dialled = address;
    });
    // Plain TCP first, vetted on 'connect', and only then TLS on top: no byte (not even a
    // ClientHello) goes to an address that failed the check. (A TLSSocket has no remoteAddress yet
    // at 'connect', which is why the layers are split.) autoSelectFamily off: one address, one try.
    const raw = netConnect({ host: hostname, port, lookup, autoSelectFamily: false });
    run.sockets.add(raw);
    raw.once('close', () => {
      run.sockets.delete(raw);
      settle(new Error('socket closed before TLS'), null);
    });
    // `on`, not `once`: a late second error on a socket must never become an uncaught exception.
    raw.on('error', (e) => settle(e, null));
    raw.once('connect', () => {
      if (vetConnected(run, raw, dialled, exempt)) startTls(run, raw, hostname, caPem, settle);
    });
  };
}

/** A hop's URL rules, then the resolve-time check (a clear error before any connection). */
async function checkHop(run: FetchRun, current: URL, hop: number): Promise<void> {
  const exempt = run.allowList.has(hostKey(current));
  const problem = urlProblem(current, exempt);
  if (problem !== undefined) {
    if (hop === 0 && problem.startsWith('the URL is longer'))
      throw new ApiError('too_long', { param: run.param, message: `\`${run.param}\` ${problem.slice(8)}.` });
    throw hop === 0 ? invalidUrlError(run.param, problem) : run.fail(`a redirect was refused: ${problem}`);
  }
  // IP literals were classified above.
  const host = bare(current.hostname);
  if (!exempt && isIP(host) === 0) {
    let addrs: string[];
    try {
      addrs = await abortable(run.resolver(host), run.ctrl.signal);
    } catch (e) {
      if (run.timedOut) throw e;
      throw run.fail('the host does not resolve', e);
    }
    if (addrs.length === 0) throw run.fail('the host does not resolve');
    const blocked = firstBlocked(addrs);
    if (blocked !== undefined) throw run.fail(`the host resolves to a blocked address (${blocked})`);
  }
}

type Answer = Dispatcher.ResponseData;

/** Where a redirect answer points, or the refusal (too many, no Location, not a URL). */
function redirectTarget(run: FetchRun, res: Answer, current: URL, hop: number, maxRedirects: number): URL {
  discard(res.body);
  if (hop >= maxRedirects) throw run.fail(`too many redirects (more than ${maxRedirects})`);
  const loc = res.headers.location;
  if (typeof loc !== 'string' || loc === '') throw run.fail(`a ${res.statusCode} redirect without a Location`);
  try {
    return new URL(loc, current);
  } catch {
    throw run.fail('a redirect to an invalid URL');
  }
}

/** The final answer: refused unless 2xx, then its body read within `maxBytes` (GET) or its declared size (HEAD). */
async function readAnswer(run: FetchRun, res: Answer, finalUrl: string, method: 'GET' | 'HEAD', maxBytes: number): Promise<SafeFetchResult> {
  const status = res.statusCode;
  if (status < 200 || status >= 300) {
    discard(res.body);
    throw run.fail(`the server answered ${status}`, undefined, status);
  }
  const ct = res.headers['content-type'];
  const contentType = typeof ct === 'string' && ct !== '' ? ct : 'application/octet-stream';
  const cl = res.headers['content-length'];
  const declared = typeof cl === 'string' && /^\d{1,15}$/.test(cl) ? Number(cl) : undefined;
  if (declared !== undefined && declared > maxBytes) {
    discard(res.body);
    throw run.fail(`the body is larger than ${maxBytes} bytes`);
  }
  if (method === 'HEAD') {
    discard(res.body);
    return { status, contentType, sizeBytes: declared ?? 0, finalUrl };
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      discard(res.body);
      throw run.fail(`the body is larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk);
  }
  return { status, contentType, bytes: Buffer.concat(chunks, size), sizeBytes: size, finalUrl };
}

/** Hop by hop (each one checked) until an answer that is not a redirect. */
async function followRedirects(run: FetchRun, agent: Agent, url: URL, opts: SafeFetchOptions): Promise<SafeFetchResult> {
  let current = url;
  let method: 'GET' | 'HEAD' = opts.method ?? 'GET';
  for (let hop = 0; ; hop++) {
    await checkHop(run, current, hop);
    const target = new URL(current.href);
    target.hash = '';
    const res = await request(target, {
      dispatcher: agent,
      method,
      headers: { accept: opts.accept ?? '*/*', 'accept-encoding': 'identity', 'user-agent': USER_AGENT },
      signal: run.ctrl.signal,
    });
    if (!REDIRECT_STATUSES.has(res.statusCode)) return readAnswer(run, res, current.href, method, opts.maxBytes);
    const next = redirectTarget(run, res, current, hop, opts.maxRedirects);
    if (res.statusCode === 303 && method !== 'HEAD') method = 'GET';
    current = next;
  }
}

/** Any failure as the refusal the client sees, with the reason (timeout, blocked address, TLS, ...) for the log. */
function refusalOf(run: FetchRun, error: unknown, timeoutMs: number): ApiError {
  const fail = run.fail;
  if (run.timedOut) return fail(`no complete answer within ${timeoutMs} ms`, error);
  if (error instanceof ApiError) return error;
  if (run.refusedRange === 'unvetted') return fail('the connection reached an address that was not vetted', error);
  if (run.refusedRange !== undefined) return fail(`the host resolves to a blocked address (${run.refusedRange})`, error);
  const code = errorCode(error);
  if (TLS_CODES.test(code)) return fail(`TLS verification failed (${code})`, error);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return fail('the host does not resolve', error);
  if (code === 'ECONNREFUSED') return fail('the connection was refused', error);
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return fail(`no complete answer within ${timeoutMs} ms`, error);
  return fail(code === '' ? 'the fetch failed' : `the fetch failed (${code})`, error);
}

/**
 * Fetches `url` under the SSRF rules. Every refusal or failure is `invalid_url` (or `too_long`
 * for an over-long client URL) naming `opts.param`. A problem of the URL's own text (scheme,
 * credentials, an IP literal in a blocked range) is said in the message, as validation says it;
 * anything learnt by resolving, connecting or fetching is a FetchRefusal with the reason in `detail` only.
 */
export async function safeFetch(url: URL, opts: SafeFetchOptions): Promise<SafeFetchResult> {
  checkOptions(opts);
  const run = startRun(opts);
  const agent = new Agent({
    connect: createConnector(run, opts.ca),
    connections: 1,
    pipelining: 1,
    allowH2: false,
    headersTimeout: opts.timeoutMs,
    bodyTimeout: opts.timeoutMs,
  });
  try {
    return await followRedirects(run, agent, url, opts);
  } catch (e) {
    throw refusalOf(run, e, opts.timeoutMs);
  } finally {
    clearTimeout(run.timer);
    for (const s of run.sockets) s.destroy();
    agent.destroy().catch(() => undefined);
  }
}
