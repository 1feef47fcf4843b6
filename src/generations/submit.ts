// The submit every asynchronous generation product shares: Idempotency-Key, validation, access,
// availability, the hold, a cheap look at the counts, the client URLs, then admission (tier, daily
// cap, concurrency, Ink hold, the row) committed in one transaction. What follows the commit (the
// vendor task for video, the hand-over to the job runner for images) is the product's own.
//
// Order of answers (docs/api/video.md and images.md document it):
//   415 / 400 invalid_json / invalid_body / 413         body (server layer, readJsonObject)
//   400 invalid_idempotency_key                         header format
//   202 replay / 409 idempotency_key_in_use             an earlier submit with the key, whatever its body (a
//   duplicate during its admission waits up to jobs.idempotencyWaitMs for its answer, the 202 or
//   its refusal replayed, before the 409)
//   400 field codes                                     the product's validate.ts, in its documented order
//   403 tier_gated                                      plan without generation products
//   503 provider_unavailable                            lane off, vendor unconfigured, model paused
//   429 daily_cap_reached, concurrency_limit            (first a cheap look, so a refused submit fetches nothing)
//   400 invalid_url                                     each URL fetched once (HEAD, else a bounded GET)
//   403 / 429 again, 402 insufficient_ink / key_ink_limit_reached   the authoritative admission transaction
//   then the product's own answers (video: 502 provider_error / 503 provider_unavailable from the vendor)
//   202                                                 accepted
import { unavailability } from '../catalog/availability.js';
import type { Catalog } from '../catalog/models.js';
import { ApiError } from '../errors.js';
import { stoppedAnswer } from '../ledger/fail-stop.js';
import type { AuthInfo } from '../server/http-context.js';
import type { Services } from '../services.js';
import { withTx } from '../store/pool.js';
import { newId } from '../util/ids.js';
import type { GenerationDeps } from './deps.js';
import type { Validated, ValidateOptions } from './fields.js';
import { assertIdempotencyKey, claimOrAnswer, priorAnswer, settleClaim, type IdempotencyProduct, type KeyClaim } from './idempotency.js';
import { checkAdmissionCounts, requireAccess, utcDayStartMs, type GenerationKind } from './plan-access.js';
import { admissionCounts, insertGeneration, type GenerationRow } from './store.js';
import { checkUrlsFetchable, claimTtlMs } from './url-check.js';
import type { Logger } from '../util/log.js';

export interface SubmitInput {
  readonly auth: AuthInfo;
  /** The HTTP request id (`req_…`): also the id of the ledger hold. */
  readonly requestId: string;
  readonly body: Record<string, unknown>;
  /** The raw Idempotency-Key header, if any. */
  readonly idempotencyKey: string | undefined;
  /** The request's logger (its request_id and key prefix bound). */
  readonly log: Logger;
  /** The submit's server span as a traceparent when it is traced (kept on the row for the job spans). */
  readonly traceParent?: string | undefined;
}

export interface SubmitResult {
  readonly body: Record<string, unknown>;
  readonly replayed: boolean;
}

/** What differs between the products' submits. */
export interface SubmitProduct<R, V extends Validated<R>> {
  readonly kind: GenerationKind;
  /** The Idempotency-Key space and the ledger's product name. */
  readonly product: IdempotencyProduct;
  readonly idPrefix: 'vgen_' | 'igen_';
  /** When the vendor is not configured: "Video generation is not available on this deployment now." */
  readonly notAvailable: string;
  validate(body: Record<string, unknown>, catalog: Catalog, opts: ValidateOptions): V;
  vendorReady(deps: GenerationDeps): boolean;
  /** The hold and the price set it was computed from. */
  price(validated: V, services: Services): { holdInk: number; priceSet: string };
  presentAccepted(row: GenerationRow): Record<string, unknown>;
  /** Work after the admission committed (the row is a recovery point from then on); may throw. */
  afterCommit(services: Services, deps: GenerationDeps, log: Logger, row: GenerationRow, validated: V): Promise<void>;
}

export async function submitGeneration<R, V extends Validated<R>>(
  product: SubmitProduct<R, V>,
  services: Services,
  deps: GenerationDeps,
  input: SubmitInput,
): Promise<SubmitResult> {
  const { config, pool } = services;
  const { auth } = input;
  if (services.failStop?.stopped) throw stoppedAnswer();
  const idemKey = input.idempotencyKey;
  assertIdempotencyKey(idemKey);
  // One wait budget for the whole submit, from its arrival.
  const keyed: KeyClaim | undefined =
    idemKey === undefined
      ? undefined
      : { keyId: auth.keyId, product: product.product, idemKey, clock: deps.clock, waitUntil: performance.now() + config.jobs.idempotencyWaitMs };
  let seenRefusedAt: Date | null = null;
  if (keyed !== undefined) {
    const prior = await priorAnswer(pool, keyed, product.presentAccepted);
    if ('body' in prior) return prior;
    seenRefusedAt = prior.seenRefusedAt;
  }

  const v = product.validate(input.body, services.catalog, { allowList: deps.fetch.allowList });
  const plan = await requireAccess(pool, auth.accountId, false, config.jobs.paygDailyCap, product.kind);
  const down = unavailability(config, services.state.current, v.model);
  if (down !== null || !product.vendorReady(deps)) {
    throw new ApiError('provider_unavailable', {
      message: down?.reason === 'paused' ? `${v.model.id} is paused; retry after Retry-After.` : product.notAvailable,
      retryAfterS: down?.retryAfterS ?? 300,
    });
  }
  const price = product.price(v, services);
  const id = newId(product.idPrefix);
  if (keyed !== undefined) {
    const owed = await claimOrAnswer(pool, { ...keyed, seenRefusedAt, generationId: id, ttlMs: claimTtlMs(services, v.urls.length) }, product.presentAccepted);
    if (owed) return owed;
  }
  let row: GenerationRow | undefined;
  let failure: unknown;
  try {
    row = await admit(product, services, deps, input, v, { id, ...price, plan });
    // From here on the lines are about this generation too.
    await product.afterCommit(services, deps, input.log.child({ generation: row.id }), row, v);
    return { body: product.presentAccepted(row), replayed: false };
  } catch (e) {
    failure = e;
    throw e;
  } finally {
    // The duplicates waiting for this submit get its answer: the 202 from the generation, or its refusal.
    if (keyed !== undefined) await settleClaim(pool, { ...keyed, generationId: id, committed: row !== undefined }, failure);
  }
}

/** The cheap look at the counts, the URL checks, then the admission transaction. */
async function admit<R, V extends Validated<R>>(
  product: SubmitProduct<R, V>,
  services: Services,
  deps: GenerationDeps,
  input: SubmitInput,
  validated: V,
  admission: { id: string; holdInk: number; priceSet: string; plan: Awaited<ReturnType<typeof requireAccess>> },
): Promise<GenerationRow> {
  const { config, pool, ledger } = services;
  const { auth } = input;
  const maxRunning = config.jobs.maxRunningPerAccount;
  // A cheap look first, so a submit that will be refused fetches nothing.
  checkAdmissionCounts(
    admission.plan,
    await admissionCounts(pool, auth.accountId, utcDayStartMs(deps.clock()), product.kind),
    maxRunning,
    deps.clock(),
    product.kind,
  );
  await checkUrlsFetchable(validated.urls, services, deps, input.log);
  // The authoritative admission: the account row lock serialises admissions of one account, and the
  // counts are read by a later statement, so they see every admission committed before the lock.
  const row = await withTx(pool, async (client) => {
    const locked = await requireAccess(client, auth.accountId, true, config.jobs.paygDailyCap, product.kind);
    const nowMs = deps.clock();
    checkAdmissionCounts(locked, await admissionCounts(client, auth.accountId, utcDayStartMs(nowMs), product.kind), maxRunning, nowMs, product.kind);
    await ledger.using(client).reserve({
      requestId: input.requestId,
      accountId: auth.accountId,
      keyId: auth.keyId,
      product: product.product,
      model: validated.model.id,
      holdInk: admission.holdInk,
    });
    return insertGeneration(client, {
      id: admission.id,
      kind: product.kind,
      accountId: auth.accountId,
      keyId: auth.keyId,
      requestId: input.requestId,
      model: validated.model.id,
      request: validated.request as unknown as Record<string, unknown>,
      priceSet: admission.priceSet,
      holdInk: admission.holdInk,
      nowMs,
      owner: deps.owner,
      leaseMs: config.jobs.leaseMs,
      traceParent: input.traceParent,
    });
  });
  services.metrics?.inkHeld(product.product, validated.model.id, admission.holdInk); // once committed
  return row;
}
