// Shared by the store-fault tests (store-faults-money, postgres-kill): paced Messages requests sent
// straight over HTTP with their elapsed time, the vendor's own answer to the same prompt for
// comparison, and the ledger rows those tests read back.
import { request } from 'undici';
import type { Pool } from '../../src/store/pool.js';
import type { AnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import type { Test } from 'tap';
import { call, type Reply } from './gateway.js';
import type { SseEvent } from './sse.js';

export interface Answer extends Reply {
  elapsedMs: number;
}

export interface MessagesProbe {
  /** A Messages body whose reply the simulator paces; the hold sits far above the reply's cost. */
  body(stream: boolean, tag: string, directives?: string): Record<string, unknown>;
  send(url: string, key: string, body: unknown): Promise<Answer>;
  /** The same request answered by the vendor directly, unpaced: what the client's answer must carry. */
  vendorReference(sim: AnthropicSimulator, tag: string): Promise<any>;
}

export function messagesProbe(o: { label: string; vendorKey: string; paceMs: number; replyTokens: number }): MessagesProbe {
  const body = (stream: boolean, tag: string, directives = `[[sim:pace=${o.paceMs}]] [[sim:tokens=${o.replyTokens}]]`) => ({
    model: 'sonnet',
    // A hold far above the reply's cost, so a charge of the vendor's usage differs from the hold.
    max_tokens: 20_000,
    stream,
    messages: [{ role: 'user', content: `${o.label} ${tag} ${directives}` }],
  });
  return {
    body,
    async send(url, key, b) {
      const t0 = performance.now();
      const res = await request(url + '/v1/messages', {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(b),
      });
      const text = await res.body.text();
      const elapsedMs = performance.now() - t0;
      let json: any;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      return { status: res.statusCode, headers: res.headers as Reply['headers'], text, json, elapsedMs };
    },
    async vendorReference(sim, tag) {
      const r = await call(sim.url, 'POST', '/v1/messages', {
        body: { ...body(false, tag, `[[sim:pace=00]] [[sim:tokens=${o.replyTokens}]]`), model: 'claude-sonnet-reference' },
        headers: { 'x-api-key': o.vendorKey, 'anthropic-version': '2023-06-01' },
      });
      if (r.status !== 200) throw new Error(`reference call: ${r.status} ${r.text}`);
      return r.json;
    },
  };
}

export const textOf = (content: any[]): string =>
  content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');

export const requestRow = async (pool: Pool, id: string) =>
  (await pool.query('SELECT status, hold_state, hold_ink, charged_ink, vendor_request_id FROM requests WHERE id = $1', [id])).rows[0];
export const resolutions = async (pool: Pool, id: string): Promise<number> =>
  (await pool.query(`SELECT count(*)::int AS n FROM ledger_journal WHERE request_id = $1 AND kind IN ('settle', 'release', 'refund', 'reconcile')`, [id]))
    .rows[0].n;
export const keyRow = async (pool: Pool, keyId: string) => (await pool.query('SELECT ink_reserved, ink_charged FROM api_keys WHERE id = $1', [keyId])).rows[0];
export const walletRow = async (pool: Pool, accountId: string) =>
  (
    await pool.query('SELECT grant_ink + payg_ink AS balance, held_grant_ink + held_payg_ink AS held, charged_ink FROM wallets WHERE account_id = $1', [
      accountId,
    ])
  ).rows[0];

/**
 * A stream cut off from its settle: the vendor's whole content and message_stop went through,
 * then exactly one final error event with code usage_unknown, and no usage frame.
 */
export function assertUsageUnknownStream(t: Test, evs: SseEvent[], vendorText: string): void {
  const deltas = evs
    .filter((e) => e.event === 'content_block_delta')
    .map((e) => JSON.parse(e.data).delta.text ?? '')
    .join('');
  t.equal(deltas, vendorText, 'stream: every content delta arrived');
  t.ok(
    evs.some((e) => e.event === 'message_stop'),
    'stream: message_stop passed through',
  );
  t.equal(evs.filter((e) => e.event === 'error').length, 1, 'stream: exactly one error event');
  t.equal(evs.at(-1)?.event, 'error', 'stream: and it is the last event');
  t.equal(JSON.parse(evs.at(-1)!.data).error?.code, 'usage_unknown', 'stream: code usage_unknown');
  t.notOk(
    evs.some((e) => e.event === 'service.usage'),
    'stream: no usage frame',
  );
}
