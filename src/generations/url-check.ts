// Client URLs are fetched on the client's behalf, so each is tried once at submit (a HEAD, or a
// bounded GET when HEAD is refused) and its bytes are fetched again under the same rules when the
// job runs. Why a fetch failed goes to the log, never to the client (see FetchRefusal).
import { ApiError } from '../errors.js';
import type { Services } from '../services.js';
import type { Logger } from '../util/log.js';
import type { LogEvent } from '../util/log-events.js';
import { FetchRefusal, safeFetch, type SafeFetchOptions, type SafeFetchResult } from '../net/safe-fetch.js';
import type { GenerationDeps } from './deps.js';
import type { CheckedUrl } from './fields.js';

/** URLs checked at once by one submit. */
export const URL_CHECK_CONCURRENCY = 8;

/** How long an Idempotency-Key claim must last for a submit that checks `urlCount` URLs. */
export function claimTtlMs(services: Services, urlCount: number): number {
  const urlWaves = Math.ceil(urlCount / URL_CHECK_CONCURRENCY);
  return services.config.jobs.leaseMs + urlWaves * 2 * services.config.media.referenceTimeoutMs;
}

/** safeFetch of a client URL with the deployment's bounds; a refusal's reason is logged under `event`. */
export async function fetchClientUrl(
  services: Services,
  deps: GenerationDeps,
  log: Logger,
  url: URL,
  options: Pick<SafeFetchOptions, 'param' | 'method' | 'accept'> & { maxBytes?: number },
  event: LogEvent,
): Promise<SafeFetchResult> {
  const m = services.config.media;
  try {
    return await safeFetch(url, {
      ...options,
      maxBytes: options.maxBytes ?? m.referenceMaxBytes,
      timeoutMs: m.referenceTimeoutMs,
      maxRedirects: m.referenceMaxRedirects,
      allowList: deps.fetch.allowList,
      resolver: deps.fetch.resolver,
      ca: deps.fetch.ca,
    });
  } catch (e) {
    if (e instanceof FetchRefusal) log.info({ param: options.param, method: options.method, host: url.host, detail: e.detail }, event);
    throw e;
  }
}

/** One URL: HEAD, and one GET when the server refuses HEAD (signed object-store URLs answer 403/405). */
async function checkOne(services: Services, deps: GenerationDeps, log: Logger, checkedUrl: CheckedUrl): Promise<ApiError | null> {
  try {
    await fetchClientUrl(services, deps, log, checkedUrl.url, { param: checkedUrl.param, method: 'HEAD' }, 'generations.url_refused');
    return null;
  } catch (e) {
    if (!(e instanceof FetchRefusal) || e.answeredStatus === undefined)
      return e instanceof ApiError ? e : new ApiError('invalid_url', { param: checkedUrl.param });
  }
  try {
    await fetchClientUrl(services, deps, log, checkedUrl.url, { param: checkedUrl.param, method: 'GET' }, 'generations.url_refused');
    return null;
  } catch (e) {
    return e instanceof ApiError ? e : new ApiError('invalid_url', { param: checkedUrl.param });
  }
}

/** Fetches each distinct URL once. First failure in field order wins. */
export async function checkUrlsFetchable(urls: readonly CheckedUrl[], services: Services, deps: GenerationDeps, log: Logger): Promise<void> {
  if (urls.length === 0) return;
  const distinct = new Map<string, CheckedUrl>();
  for (const u of urls) if (!distinct.has(u.url.href)) distinct.set(u.url.href, u);
  const results = new Map<string, ApiError | null>();
  const queue = [...distinct.values()];
  const workers = Array.from({ length: Math.min(URL_CHECK_CONCURRENCY, queue.length) }, async () => {
    for (let u = queue.shift(); u !== undefined; u = queue.shift()) results.set(u.url.href, await checkOne(services, deps, log, u));
  });
  await Promise.all(workers);
  for (const u of urls) {
    const err = results.get(u.url.href);
    if (err) {
      // Name the field this URL came from (a repeated URL is reported at its first field).
      throw err.param === u.param ? err : new ApiError(err.code, { param: u.param, message: err.message.split(`\`${err.param}\``).join(`\`${u.param}\``) });
    }
  }
}
