// Responses over one WebSocket, at its edges, on each HTTP engine: a revoked key refused at the
// upgrade; a socket closed when idle and at its maximum lifetime (a running turn first ends whole);
// the usage frame `none`, the key's or the upgrade request's, sending nothing after the terminal event.
import OpenAI from 'openai';
import type { Test } from 'tap';
import { eachEngine } from '../helpers/engines.js';
import { operatorCli } from '../helpers/operator-cli.js';
import { startWsStack, TERMINAL, upgradeAnswer, WsConversation, type WsEvent } from '../helpers/responses-ws.js';
import { responsesCharge } from '../helpers/responses-harness.js';

/** A turn that runs at least TOKENS * (PACE_MS - 1) ms: the simulator waits PACE_MS before each delta (a timer may fire 1 ms early). */
const PACE_MS = 20;
const TOKENS = 100;
const TURN_MIN_MS = TOKENS * (PACE_MS - 1);
const longTurn = { model: 'astra', input: `a long one [[sim:pace=${PACE_MS}]] [[sim:tokens=${TOKENS}]]` };

/** The events of one whole turn: created first, every delta, the terminal event, the usage event last. */
function assertWhole(t: Test, ev: WsEvent[], deltas: number, what: string): void {
  t.equal(ev[0]?.type, 'response.created', `${what}: opens with response.created`);
  t.equal(ev.filter((e) => e.type === 'response.output_text.delta').length, deltas, `${what}: every delta`);
  t.equal(ev.at(-2)?.type, 'response.completed', `${what}: completed`);
  t.match(ev.at(-1), { type: 'service.usage', ink_charged: Number }, `${what}: then billed`);
  t.notOk(
    ev.some((e) => e.type === 'error'),
    `${what}: no error event`,
  );
}

eachEngine('a revoked key is refused at the upgrade: the 401 envelope, no socket, nothing held', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const c = new WsConversation(s.client);
  t.equal((await c.turn({ model: 'astra', input: 'before' })).at(-1)?.type, 'service.usage', 'the key serves a turn');
  c.close();
  await c.closedP;

  await operatorCli(s.g.config).cli('key', 'revoke', s.k.keyId);
  const vendorCalls = s.sim.requestCount;
  // Its socket before was authenticated from the key cache; an upgrade looks the key up afresh.
  const refused = await upgradeAnswer(s.g.url, s.k.key);
  t.equal(refused.status, 401, 'the upgrade right after the revoke: 401');
  t.match(refused.json, { error: { type: 'authentication_error', code: 'invalid_api_key', request_id: /^req_/ } }, 'the usual envelope');
  t.equal(refused.headers['www-authenticate'], 'Bearer');
  const sdk = new WsConversation(s.client);
  await sdk.closedP;
  t.match(sdk.errors.map((e) => String(e.message)).join('\n'), /401/, 'the SDK reports the 401');
  t.equal(s.sim.requestCount, vendorCalls, 'nothing reached the vendor');

  const upgrades = s.lines.filter((l) => l.msg === 'http.request' && l.method === 'GET' && l.route === '/v1/responses');
  t.same(
    upgrades.map((l) => l.status),
    [101, 401, 401],
    'each upgrade logged once: the socket, then two refusals',
  );
  t.same(
    (await s.settledRecords(1)).map((r) => r.status),
    ['settled'],
    'the one turn settled; nothing held for the refusals',
  );
  await s.ledgerCheck();
});

eachEngine('an idle socket closes (1000) after idleTimeoutMs; a turn longer than that is not cut', async (t, engine) => {
  const idleMs = 1000;
  const s = await startWsStack(t, engine, { responses: { websocket: { idleTimeoutMs: idleMs, maxSocketsPerKey: 1 } } });
  const c = new WsConversation(s.client);
  const sentMs = performance.now();
  assertWhole(t, await c.turn(longTurn), TOKENS, `a turn of at least ${TURN_MIN_MS} ms on a socket idle after ${idleMs} ms`);
  const closed = await c.closedP;
  const afterMs = performance.now() - sentMs;
  t.equal(closed.code, 1000, 'then the socket closed, normal closure');
  t.match(String(closed.reason), /idle/, 'saying it was idle');
  // Time is the behaviour here: the idle time counts from the turn's end, never from its message.
  t.ok(afterMs >= TURN_MIN_MS + idleMs, `closed ${afterMs.toFixed(0)} ms after the message: the turn, then ${idleMs} ms idle`);
  t.same(c.unread(), [], 'nothing after the usage event');

  // The closed socket gave its place under the key's cap (1) back.
  const again = new WsConversation(s.client);
  t.equal((await again.turn({ model: 'astra', input: 'again' })).at(-1)?.type, 'service.usage', 'a new socket opens and serves');
  again.close();
  await again.closedP;
  t.same(
    (await s.settledRecords(2)).map((r) => r.status),
    ['settled', 'settled'],
    'both turns settled',
  );
  await s.ledgerCheck();
});

eachEngine('at maxLifeMs a socket closes (1000): an idle one at once, one running a turn after the turn ends whole', async (t, engine) => {
  const lifeMs = 1000;
  const s = await startWsStack(t, engine, { responses: { websocket: { maxLifeMs: lifeMs } } });
  const idle = new WsConversation(s.client);
  const busy = new WsConversation(s.client);
  const sentMs = performance.now();
  // The turn starts once its socket is open and lasts longer than the socket's whole life: the
  // lifetime ends while it runs.
  busy.send(longTurn);
  const idleClosed = await idle.closedP;
  t.equal(idleClosed.code, 1000, 'the idle socket: normal closure');
  t.match(String(idleClosed.reason), /maximum lifetime/, 'at its maximum lifetime');
  t.same(idle.errors, [], 'no error on the idle one');

  assertWhole(t, await busy.readTurn(), TOKENS, 'the turn running at the lifetime');
  const busyClosed = await busy.closedP;
  t.ok(performance.now() - sentMs >= TURN_MIN_MS, 'closed after the turn');
  t.equal(busyClosed.code, 1000, 'then its socket closed, normal closure');
  t.match(String(busyClosed.reason), /maximum lifetime/);
  t.same(busy.unread(), [], 'nothing after the usage event');
  t.same(
    (await s.settledRecords(1)).map((r) => r.status),
    ['settled'],
    'the turn settled once',
  );
  await s.ledgerCheck();
});

eachEngine("usage frame none, the key's or the upgrade request's: nothing after the terminal event", async (t, engine) => {
  const s = await startWsStack(t, engine);
  let logged = 0;
  /** By key: what the client can tell it was charged (a terminal event's usage, priced; or the usage event). */
  const told = new Map<string, number>();
  const tell = (keyId: string, ink: number) => told.set(keyId, (told.get(keyId) ?? 0) + ink);
  /** Runs `n` turns that end at their terminal event; each next one's events follow the last with nothing between. */
  const framelessTurns = async (c: WsConversation, n: number, what: string, keyId: string): Promise<void> => {
    for (let i = 0; i < n; i++) {
      c.send({ model: 'astra', input: `${what} ${i}` });
      const ev = await c.readTurn(true);
      tell(keyId, responsesCharge((ev.at(-1) as unknown as { response: { usage: Parameters<typeof responsesCharge>[0] } }).response.usage));
      t.equal(ev[0]?.type, 'response.created', `${what} ${i}: the turn's first event follows the last turn's terminal event`);
      t.equal(ev.filter((e) => TERMINAL.has(e.type)).length, 1, `${what} ${i}: ends with its terminal event`);
      t.equal(ev.at(-1)?.type, 'response.completed');
      // The turn's access line is written once its last message was sent: all it sent is before
      // anything the next turn sends on the same socket.
      await s.turnsLogged(++logged);
    }
    c.close();
    await c.closedP;
    t.same(
      c.unread().map((e) => e.type),
      [],
      `${what}: no service.usage before the socket closed`,
    );
  };
  await framelessTurns(new WsConversation(s.client, { 'X-Service-Usage-Frame': 'none' }), 2, 'X-Service-Usage-Frame: none on the upgrade', s.k.keyId);

  const k2 = await s.g.newKey({ name: 'frameless' });
  await s.g.gw.services.ledger.topUp(k2.accountId, 500_000, 'test');
  t.match(await operatorCli(s.g.config).cli('key', 'set', k2.keyId, '--usage-frame', 'none'), { usage_frame: 'none' }, 'inkgate key set --usage-frame none');
  const client2 = new OpenAI({ baseURL: s.g.url + '/v1', apiKey: k2.key, maxRetries: 0 });
  await framelessTurns(new WsConversation(client2), 2, "the key's usage frame none", k2.keyId);
  const over = new WsConversation(client2, { 'X-Service-Usage-Frame': 'event' });
  const usage = (await over.turn({ model: 'astra', input: 'with the frame' })).at(-1);
  t.match(usage, { type: 'service.usage', ink_charged: Number }, 'the header overrides the key');
  tell(k2.keyId, (usage as unknown as { ink_charged: number }).ink_charged);
  over.close();
  await over.closedP;

  for (const [k, n] of [
    [s.k, 2],
    [k2, 3],
  ] as const) {
    const rows = await s.settledRecords(n, k.keyId);
    t.same(
      rows.map((r) => r.status),
      Array(n).fill('settled'),
      `${n} turns settled`,
    );
    const me = await s.me(k.key);
    t.equal(
      me.key.ink_charged,
      rows.reduce((a, r) => a + r.charged, 0),
      'the key charged once per turn, frame or none',
    );
    t.equal(me.key.ink_charged, told.get(k.keyId), 'and what its client can tell, turn by turn');
    t.equal(me.key.ink_reserved, 0, 'nothing held');
  }
  await s.ledgerCheck();
});

eachEngine('the next response.create sent on the terminal event waits for the running turn to be charged: none refused', async (t, engine) => {
  // Each settle written before it answers (the ledger's sync durability): the turn's end comes well after its terminal event.
  const s = await startWsStack(t, engine, { ledger: { durability: 'sync' } });
  const turns = 10;
  /** What the client can tell it was charged, turn by turn: the usage event, or the terminal event's usage priced. */
  let toldInk = 0;
  for (const frame of ['event', 'none'] as const) {
    const c = new WsConversation(s.client, { 'X-Service-Usage-Frame': frame });
    const seen: string[] = [];
    let sent = 0;
    let ended = 0;
    const send = () => c.send({ model: 'astra', input: `usage frame ${frame}, turn ${sent++}` });
    send();
    while (ended < turns) {
      const e = await c.next();
      seen.push(e.type);
      if (frame === 'event' && e.type === 'service.usage') toldInk += (e as unknown as { ink_charged: number }).ink_charged;
      if (frame === 'none' && e.type === 'response.completed')
        toldInk += responsesCharge((e as unknown as { response: { usage: Parameters<typeof responsesCharge>[0] } }).response.usage);
      // As an agent loop does: the next request as soon as the response is there, its charge not awaited.
      if ((TERMINAL.has(e.type) || e.type === 'error') && sent < turns) send();
      // Each message ends with one event: its usage event (its terminal one with none), or an error.
      if (e.type === 'error' || (frame === 'none' ? TERMINAL.has(e.type) : e.type === 'service.usage')) ended++;
    }
    c.close();
    await c.closedP;
    seen.push(...c.unread().map((e) => e.type));
    const shape = frame === 'none' ? ['response.created', 'response.completed'] : ['response.created', 'response.completed', 'service.usage'];
    t.same(
      seen.filter((x) => shape.includes(x) || x === 'error'),
      Array.from({ length: turns }, () => shape).flat(),
      `usage frame ${frame}: ${turns} turns, each whole and in order, none refused`,
    );
  }
  const rows = await s.settledRecords(2 * turns);
  t.equal(rows.filter((r) => r.status === 'settled').length, 2 * turns, 'every turn settled');
  t.equal(
    (await s.me()).key.ink_charged,
    rows.reduce((a, r) => a + r.charged, 0),
    'charged once each',
  );
  t.equal((await s.me()).key.ink_charged, toldInk, 'and what the client can tell, turn by turn');
  await s.ledgerCheck();
});
