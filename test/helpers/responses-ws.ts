// Responses over one WebSocket, for tests: a gateway on a chosen engine with the lane open, the
// OpenAI simulator behind it, a funded key, the access lines kept; and a socket through the
// official SDK's ResponsesWS whose events a test reads turn by turn; the raw HTTP answer to an
// upgrade request.
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import type { Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import type { EngineName } from '../../src/server/engine.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { startTestGateway } from './gateway.js';
import { assertLedgerInvariant } from './ledger-invariant.js';
import { createLogger } from '../../src/util/log.js';
import type { LoggedLine } from './log-lines.js';
import { operatorCli } from './operator-cli.js';
import { me as meOf } from './responses-harness.js';

const VENDOR_KEY = 'sk-openai-ws-vendor';

export async function startWsStack(t: Test, engine: EngineName, gateway: Record<string, unknown> = {}) {
  const sim = await startOpenAISimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const access = watchedLines();
  const g = await startTestGateway(
    t,
    { server: { engine }, vendors: { openai: { baseUrl: sim.url, apiKey: VENDOR_KEY } }, ...gateway },
    { accessLog: access.log },
  );
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 500_000, 'test');
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: k.key, maxRetries: 0 });
  /** The ledger's rules hold, as the operator's `inkgate ledger check` and the tests' own invariant see them. */
  const ledgerCheck = async (): Promise<void> => {
    const report = await operatorCli(g.config).cli('ledger', 'check');
    t.match(report, { ok: true, violations: [] }, 'inkgate ledger check: ok');
    await assertLedgerInvariant(t, g.db.pool);
  };
  const me = (key = k.key) => meOf(g, key);
  /**
   * The key's request records, once `expected` are written and none is running any more (the
   * settle follows the vendor's end; records are written behind, in group commits), bounded.
   */
  const settledRecords = async (expected: number, keyId = k.keyId) => {
    const q = async () => (await g.db.pool.query(`SELECT id, status, charged_ink::int AS charged FROM requests WHERE key_id = $1 ORDER BY id`, [keyId])).rows;
    let rows = await q();
    for (let i = 0; i < 200 && (rows.length < expected || rows.some((r) => r.status === 'running')); i++) {
      await new Promise((r) => setTimeout(r, 25)); // polling the database, bounded at 5 s
      rows = await q();
    }
    return rows as Array<{ id: string; status: string; charged: number }>;
  };
  /** Resolves once `n` turns have their access line (a turn's line is written after its last message was sent). */
  const turnsLogged = async (n: number): Promise<void> => {
    const turns = (): number => access.lines.filter((l) => l.msg === 'http.request' && l.transport === 'websocket').length;
    await access.lineWhere(() => turns() >= n);
  };
  return { sim, g, k, client, lines: access.lines, turnsLogged, ledgerCheck, me, settledRecords };
}

/**
 * The access log's lines as the operator gets them, and `lineWhere`: the first line that matches,
 * waiting for it when it is not written yet (a line is written once its request has ended).
 */
function watchedLines() {
  const lines: LoggedLine[] = [];
  const waiting = new Set<{ match: (l: LoggedLine) => boolean; found: (l: LoggedLine) => void }>();
  const log = createLogger('info', (text) => {
    const line = JSON.parse(text) as LoggedLine;
    lines.push(line);
    for (const w of waiting)
      if (w.match(line)) {
        waiting.delete(w);
        w.found(line);
      }
  });
  const lineWhere = (match: (l: LoggedLine) => boolean): Promise<LoggedLine> => {
    const seen = lines.find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((found) => waiting.add({ match, found }));
  };
  return { log, lines, lineWhere };
}

/** The HTTP answer to a WebSocket upgrade request on /v1/responses (101 when the socket opened). */
export function upgradeAnswer(url: string, key: string | undefined): Promise<{ status: number; headers: Record<string, unknown>; json: any }> {
  return new Promise((resolveA, reject) => {
    const headers: Record<string, string> = {
      Connection: 'Upgrade',
      Upgrade: 'websocket',
      'Sec-WebSocket-Key': randomBytes(16).toString('base64'),
      'Sec-WebSocket-Version': '13',
    };
    if (key !== undefined) headers.Authorization = `Bearer ${key}`;
    const req = httpRequest(url + '/v1/responses', { headers });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => void (text += d));
      res.on('end', () => resolveA({ status: res.statusCode ?? 0, headers: res.headers, json: text === '' ? undefined : JSON.parse(text) }));
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolveA({ status: res.statusCode ?? 0, headers: res.headers, json: undefined });
    });
    req.on('error', reject);
    req.end();
  });
}

export type WsEvent = { type: string; [k: string]: any };

/** A response's terminal events. */
export const TERMINAL: ReadonlySet<string> = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/** One ResponsesWS and a queue of what it received: events in order, then its close. */
export class WsConversation {
  readonly rws: ResponsesWS;
  private readonly queue: WsEvent[] = [];
  private waiter: (() => void) | undefined;
  closed: { code: number; reason: string } | undefined;
  readonly errors: Error[] = [];
  readonly closedP: Promise<{ code: number; reason: string }>;

  /** `headers`: added to the upgrade request (X-Service-Usage-Frame). */
  constructor(client: OpenAI, headers?: Record<string, string>) {
    this.rws = new ResponsesWS(client, headers === undefined ? undefined : { headers });
    this.rws.on('event', (e) => this.push(e as unknown as WsEvent));
    // The SDK reports error events here too (they are in the queue already); and socket failures.
    this.rws.on('error', (e) => void this.errors.push(e));
    this.closedP = new Promise((resolveC) =>
      this.rws.on('close', (code: number, reason: string) => {
        this.closed = { code, reason };
        this.wake();
        resolveC({ code, reason });
      }),
    );
  }

  private push(e: WsEvent): void {
    this.queue.push(e);
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** The next event; throws when the socket closed first. */
  async next(): Promise<WsEvent> {
    while (this.queue.length === 0) {
      if (this.closed) throw new Error(`socket closed (${this.closed.code} ${this.closed.reason}) with no event left`);
      await new Promise<void>((r) => (this.waiter = r));
    }
    return this.queue.shift()!;
  }

  send(body: Record<string, unknown>): void {
    this.rws.send({ type: 'response.create', ...body } as never);
  }

  /** Reads one turn's events: up to and including `service.usage` or an `error` event (or the terminal event, with `untilTerminal`). */
  async readTurn(untilTerminal = false): Promise<WsEvent[]> {
    const out: WsEvent[] = [];
    for (;;) {
      const e = await this.next();
      out.push(e);
      if (e.type === 'service.usage' || e.type === 'error' || (untilTerminal && TERMINAL.has(e.type))) return out;
    }
  }

  /** What arrived and was not read yet (everything the server sent, once the socket has closed). */
  unread(): WsEvent[] {
    return this.queue.splice(0);
  }

  /** Sends a turn and reads it. */
  async turn(body: Record<string, unknown>): Promise<WsEvent[]> {
    this.send(body);
    return this.readTurn();
  }

  close(): void {
    this.rws.close({ code: 1000, reason: 'done' });
  }
}
