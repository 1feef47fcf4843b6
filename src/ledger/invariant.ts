// The ledger's invariant, checked against the real tables: by every ledger test, by the bench after
// its load, and by operators (`inkgate ledger check`, exit 1 on a violation). Each query names the
// rule it checks; any row it returns is a violation. Read-only, and safe on a live database (each
// rule is one statement; rows moving between two statements can show a transient difference only
// between rules, never inside one).
import type { Queryable } from '../store/pool.js';

const OPENING = `('reserve', 'lease_hold')`;
const RESOLUTION = `('settle', 'release', 'refund', 'reconcile')`;

const CHECKS: ReadonlyArray<readonly [rule: string, sql: string]> = [
  [
    'per wallet: grant + payg + leased + held + charged + expired = all credits, no pool below zero',
    `SELECT account_id FROM wallets
      WHERE grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink <> credited_ink
         OR least(grant_ink, payg_ink, leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, charged_ink, expired_ink, credited_ink) < 0`,
  ],
  [
    'per wallet: held pools = the durable open holds taken from them (holds still in a lease are not held)',
    `SELECT w.account_id, w.held_grant_ink, w.held_payg_ink, coalesce(o.g, 0) AS open_grant, coalesce(o.p, 0) AS open_payg
       FROM wallets w
       LEFT JOIN (SELECT account_id, sum(hold_grant_ink) AS g, sum(hold_payg_ink) AS p FROM requests
                   WHERE hold_state = 'open' AND NOT leased GROUP BY account_id) o ON o.account_id = w.account_id
      WHERE w.held_grant_ink <> coalesce(o.g, 0) OR w.held_payg_ink <> coalesce(o.p, 0)`,
  ],
  [
    'per wallet: leased pools = what its live leases hold',
    `SELECT w.account_id, w.leased_grant_ink, w.leased_payg_ink, coalesce(l.g, 0) AS lease_grant, coalesce(l.p, 0) AS lease_payg
       FROM wallets w
       LEFT JOIN (SELECT account_id, sum(grant_ink) AS g, sum(payg_ink) AS p FROM leases WHERE state = 'live' GROUP BY account_id) l
              ON l.account_id = w.account_id
      WHERE w.leased_grant_ink <> coalesce(l.g, 0) OR w.leased_payg_ink <> coalesce(l.p, 0)`,
  ],
  [
    'per lease: it holds at least its holds in flight; a closed lease is empty with none; its key is of its account',
    `SELECT l.id, l.state, l.grant_ink, l.payg_ink, coalesce(o.g, 0) AS open_grant, coalesce(o.p, 0) AS open_payg
       FROM leases l
       JOIN api_keys k ON k.id = l.key_id
       LEFT JOIN (SELECT lease_id, sum(hold_grant_ink) AS g, sum(hold_payg_ink) AS p FROM requests WHERE leased GROUP BY lease_id) o
              ON o.lease_id = l.id
      WHERE k.account_id <> l.account_id
         OR (l.state = 'live' AND (l.grant_ink < coalesce(o.g, 0) OR l.payg_ink < coalesce(o.p, 0)))
         OR (l.state <> 'live' AND (l.grant_ink + l.payg_ink <> 0 OR o.lease_id IS NOT NULL))`,
  ],
  [
    'per lease: its journal rows sum to what it holds',
    `SELECT l.id FROM leases l
       LEFT JOIN (SELECT lease_id, sum(leased_grant_ink) AS g, sum(leased_payg_ink) AS p FROM ledger_journal
                   WHERE lease_id IS NOT NULL GROUP BY lease_id) j ON j.lease_id = l.id
      WHERE (l.grant_ink, l.payg_ink) IS DISTINCT FROM (coalesce(j.g, 0), coalesce(j.p, 0))`,
  ],
  [
    'per lease: its flushed charges = the charges of the requests it settled itself',
    `SELECT l.id, coalesce(j.c, 0) AS journal_charged, coalesce(r.c, 0) AS requests_charged FROM leases l
       LEFT JOIN (SELECT lease_id, sum(charged_ink) AS c FROM ledger_journal WHERE kind = 'lease_flush' GROUP BY lease_id) j ON j.lease_id = l.id
       LEFT JOIN (SELECT q.lease_id, sum(q.charged_ink) AS c FROM requests q
                   WHERE q.lease_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ledger_journal x WHERE x.request_id = q.id)
                   GROUP BY q.lease_id) r ON r.lease_id = l.id
      WHERE coalesce(j.c, 0) <> coalesce(r.c, 0)`,
  ],
  [
    'per wallet: charged = the charges of its requests',
    `SELECT w.account_id, w.charged_ink, coalesce(r.c, 0) AS requests_charged
       FROM wallets w
       LEFT JOIN (SELECT account_id, sum(charged_ink) AS c FROM requests GROUP BY account_id) r ON r.account_id = w.account_id
      WHERE w.charged_ink <> coalesce(r.c, 0)`,
  ],
  [
    'per wallet: the journal sums to the balances, column by column',
    `SELECT w.account_id FROM wallets w
       LEFT JOIN (SELECT account_id, sum(grant_ink) g, sum(payg_ink) p, sum(leased_grant_ink) lg, sum(leased_payg_ink) lp,
                         sum(held_grant_ink) hg, sum(held_payg_ink) hp, sum(charged_ink) c, sum(expired_ink) e, sum(credited_ink) cr
                    FROM ledger_journal GROUP BY account_id) j ON j.account_id = w.account_id
      WHERE (w.grant_ink, w.payg_ink, w.leased_grant_ink, w.leased_payg_ink, w.held_grant_ink, w.held_payg_ink, w.charged_ink,
             w.expired_ink, w.credited_ink)
         IS DISTINCT FROM (coalesce(j.g, 0), coalesce(j.p, 0), coalesce(j.lg, 0), coalesce(j.lp, 0), coalesce(j.hg, 0), coalesce(j.hp, 0),
                           coalesce(j.c, 0), coalesce(j.e, 0), coalesce(j.cr, 0))`,
  ],
  [
    'every journal row balances on its own',
    `SELECT id FROM ledger_journal
      WHERE grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink <> credited_ink`,
  ],
  [
    'every hold: one opening row (none for a void id), at most one resolution, and one exactly when it is no longer open',
    `SELECT r.id, r.hold_state, r.lease_id, r.leased, count(j.id) FILTER (WHERE j.kind IN ${OPENING}) AS openings,
            count(j.id) FILTER (WHERE j.kind IN ${RESOLUTION}) AS resolutions, count(j.id) FILTER (WHERE j.kind = 'late_charge') AS late
       FROM requests r LEFT JOIN ledger_journal j ON j.request_id = r.id
      GROUP BY r.id, r.hold_state, r.lease_id, r.leased
     HAVING count(j.id) FILTER (WHERE j.kind IN ${OPENING}) > 1
         OR count(j.id) FILTER (WHERE j.kind IN ${RESOLUTION}) + count(j.id) FILTER (WHERE j.kind = 'late_charge') > 1
         -- a hold on the exact path: a reserve row, and a resolution once it ended
         OR (r.lease_id IS NULL AND count(j.id) FILTER (WHERE j.kind IN ${OPENING}) <> (CASE WHEN r.hold_state = 'void' THEN 0 ELSE 1 END))
         -- a hold that left its lease as a durable one: the same from its opening row on
         OR (count(j.id) FILTER (WHERE j.kind IN ${OPENING}) = 1
             AND count(j.id) FILTER (WHERE j.kind IN ${RESOLUTION}) <> (CASE WHEN r.hold_state IN ('open', 'void') THEN 0 ELSE 1 END))
         -- still in its lease: nothing of its own in the journal yet
         OR (r.leased AND count(j.id) > 0)
         -- open outside a lease: it must have been opened durably
         OR (r.hold_state = 'open' AND NOT r.leased AND count(j.id) FILTER (WHERE j.kind IN ${OPENING}) <> 1)
         -- charged outside its lease's flushes only through a late charge
         OR (count(j.id) FILTER (WHERE j.kind = 'late_charge') = 1 AND (r.hold_state <> 'settled' OR count(j.id) <> 1))`,
  ],
  [
    'every hold: its journal rows match the record (split, charge, what went back, what lapsed)',
    `SELECT r.id FROM requests r
       JOIN ledger_journal j ON j.request_id = r.id
      GROUP BY r.id, r.hold_state, r.hold_grant_ink, r.hold_payg_ink, r.charged_ink, r.charged_grant_ink, r.charged_payg_ink, r.expired_ink
     HAVING sum(j.held_grant_ink) <> (CASE WHEN r.hold_state = 'open' THEN r.hold_grant_ink ELSE 0 END)
         OR sum(j.held_payg_ink) <> (CASE WHEN r.hold_state = 'open' THEN r.hold_payg_ink ELSE 0 END)
         OR sum(j.charged_ink) <> r.charged_ink
         OR sum(j.expired_ink) <> r.expired_ink
         OR sum(j.grant_ink + j.leased_grant_ink) <> (CASE WHEN r.hold_state = 'open' THEN -r.hold_grant_ink ELSE -r.charged_grant_ink - r.expired_ink END)
         OR sum(j.payg_ink + j.leased_payg_ink) <> (CASE WHEN r.hold_state = 'open' THEN -r.hold_payg_ink ELSE -r.charged_payg_ink END)`,
  ],
  [
    'every hold: charge <= hold, released/refunded/void charge nothing, charged grant-first',
    `SELECT id FROM requests
      WHERE charged_ink > hold_ink
         OR (hold_state IN ('released', 'refunded', 'void') AND charged_ink <> 0)
         OR charged_grant_ink <> least(charged_ink, hold_grant_ink)`,
  ],
  [
    // The cap is checked when Ink is taken: a cap edited below what is already charged or held is
    // allowed (it stops new holds), so what the state can show is that no lease holds headroom the
    // cap does not leave.
    'per key: ink_reserved = its durable open holds, ink_charged = its charges, ink_leased = its live leases, a lease within the cap',
    `SELECT k.id, k.ink_reserved, k.ink_charged, k.ink_leased, coalesce(r.open_ink, 0) AS open_ink, coalesce(r.charged, 0) AS charged,
            coalesce(l.leased, 0) AS leased
       FROM api_keys k
       LEFT JOIN (SELECT key_id, sum(hold_ink) FILTER (WHERE hold_state = 'open' AND NOT leased) AS open_ink, sum(charged_ink) AS charged
                    FROM requests GROUP BY key_id) r ON r.key_id = k.id
       LEFT JOIN (SELECT key_id, sum(grant_ink + payg_ink) AS leased FROM leases WHERE state = 'live' GROUP BY key_id) l ON l.key_id = k.id
      WHERE k.ink_reserved <> coalesce(r.open_ink, 0) OR k.ink_charged <> coalesce(r.charged, 0) OR k.ink_leased <> coalesce(l.leased, 0)
         OR (k.ink_limit IS NOT NULL AND k.ink_charged + k.ink_reserved + k.ink_leased > greatest(k.ink_limit, k.ink_charged + k.ink_reserved))`,
  ],
  [
    'every journal row points to its wallet, a hold move to its request, a lease move to its lease, of that account and key',
    `SELECT j.id FROM ledger_journal j
       LEFT JOIN wallets w ON w.account_id = j.account_id
       LEFT JOIN requests r ON r.id = j.request_id
       LEFT JOIN leases l ON l.id = j.lease_id
      WHERE w.account_id IS NULL
         OR (j.request_id IS NOT NULL AND (r.id IS NULL OR r.account_id <> j.account_id OR r.key_id <> j.key_id))
         OR (j.lease_id IS NOT NULL AND j.kind <> 'late_charge' AND (l.id IS NULL OR l.account_id <> j.account_id OR l.key_id <> j.key_id))`,
  ],
  // `requests` has no foreign key to api_keys (the flush checks each record against its lease
  // instead): a request whose key is missing, or is a key of another account, is found here.
  [
    'a request spends its own account through its own key, which exists',
    `SELECT r.id, r.account_id, r.key_id, k.account_id AS key_account FROM requests r
       LEFT JOIN api_keys k ON k.id = r.key_id
      WHERE k.id IS NULL OR k.account_id <> r.account_id`,
  ],
  [
    "a request written from a lease names a lease that exists, and has the lease's account and key",
    `SELECT r.id, r.lease_id, r.account_id, r.key_id, l.account_id AS lease_account, l.key_id AS lease_key FROM requests r
       LEFT JOIN leases l ON l.id = r.lease_id
      WHERE r.lease_id IS NOT NULL AND (l.id IS NULL OR l.account_id <> r.account_id OR l.key_id <> r.key_id)`,
  ],
];

export interface Violation {
  readonly rule: string;
  /** Rows found breaking the rule. */
  readonly count: number;
  /** The first few of them, as the query returned them. */
  readonly rows: readonly unknown[];
}

export const LEDGER_RULES: readonly string[] = CHECKS.map(([rule]) => rule);

/** Every rule over the whole schema; an empty list when the ledger is consistent. */
export async function checkLedger(database: Queryable, maxRows = 5): Promise<Violation[]> {
  const out: Violation[] = [];
  for (const [rule, sql] of CHECKS) {
    const { rows } = await database.query(sql);
    if (rows.length > 0) out.push({ rule, count: rows.length, rows: rows.slice(0, maxRows) });
  }
  return out;
}
