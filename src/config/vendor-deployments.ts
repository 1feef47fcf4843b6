// A vendor's deployments: the places one vendor's API is served from (regions, accounts, a proxy),
// each with its own base URL and key. Two ways to write them, one result:
// - the file: `vendors.<vendor>.deployments: [{ name, baseUrl, apiKey, weight?, maxConcurrent? }]`;
// - `baseUrl` / `apiKey` (INKGATE_<VENDOR>_BASE_URL / _API_KEY): one URL as before, or a
//   comma-separated list, with one key for all or a list of keys of the same length. Each such
//   deployment is named after its host (a second one on the same host gets `-2`, and so on).
// After loading, `deployments` is the list the pools are built from, and `baseUrl` / `apiKey`
// are the first deployment's (what "this vendor is configured" reads).

import { plainHttpUrl } from './http-url.js';

export const VENDORS = ['anthropic', 'openai', 'ark', 'gemini'] as const;
export type VendorId = (typeof VENDORS)[number];

/** One deployment as the pools use it (weight and maxConcurrent filled in). */
export interface VendorDeployment {
  readonly name: string;
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly weight: number;
  /** Requests in flight above which the deployment is passed over; null: no cap of its own. */
  readonly maxConcurrent: number | null;
}

/** The config's vendor entry, as validated (weight and maxConcurrent may be absent). */
export interface VendorEntry {
  baseUrl: string | null;
  apiKey: string | null;
  deployments: Array<{ name: string; baseUrl: string; apiKey: string; weight?: number; maxConcurrent?: number | null }>;
}

/**
 * The API path each vendor's base URL ends in, as its own SDKs write it: Anthropic's base is the
 * bare host (its clients add /v1/messages), OpenAI's ends in /v1, Gemini's REST base in /v1beta,
 * Ark's in /api/v3.
 */
const VENDOR_API_PATHS: Readonly<Record<VendorId, string>> = Object.freeze({ anthropic: '', openai: '/v1', ark: '/api/v3', gemini: '/v1beta' });

/**
 * A vendor base URL in the form our clients join paths to. Operators write it either way (with or
 * without the API path; a copied SDK setting or a bare host), and a wrong guess reached the vendor
 * as a 404 that the text lanes report as the client's 400 upstream_rejected. So: trailing slashes
 * go; a bare host gets the vendor's API path; an Anthropic base ending in /v1 loses it. Any other
 * path (a proxy's prefix) is kept as written.
 */
export function vendorBaseUrl(vendor: VendorId, raw: string): string {
  const url = plainHttpUrl(`vendors.${vendor}.baseUrl`, raw, ' (the key has its own setting)');
  let path = url.pathname.replace(/\/+$/, '');
  const apiPath = VENDOR_API_PATHS[vendor];
  if (vendor === 'anthropic' && path.endsWith('/v1')) path = path.slice(0, -3);
  else if (path === '') path = apiPath;
  return url.origin + path;
}

const envName = (vendor: VendorId, what: 'BASE_URL' | 'API_KEY'): string => `INKGATE_${vendor.toUpperCase()}_${what}`;

/** The items of a comma-separated setting, trimmed, empty ones left out. */
export const splitList = (setting: string): string[] =>
  setting
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');

/** The deployments written as `baseUrl` / `apiKey` (one or comma-separated lists), named after their hosts. */
function fromLists(vendor: VendorId, baseUrl: string, apiKey: string | null): VendorDeployment[] {
  const urls = splitList(baseUrl).map((u) => vendorBaseUrl(vendor, u));
  if (urls.length === 0) throw new Error(`config: vendors.${vendor}.baseUrl (${envName(vendor, 'BASE_URL')}) lists no URL`);
  if (apiKey === null) return [];
  const keys = splitList(apiKey);
  if (keys.length !== 1 && keys.length !== urls.length) {
    throw new Error(
      `config: ${envName(vendor, 'API_KEY')} (vendors.${vendor}.apiKey) must be one key for every deployment or a comma-separated list of ${urls.length} keys, one per URL of ${envName(vendor, 'BASE_URL')}; it has ${keys.length}`,
    );
  }
  const seen = new Map<string, number>();
  return urls.map((url, index) => {
    const host = new URL(url).host;
    const n = (seen.get(host) ?? 0) + 1;
    seen.set(host, n);
    return { name: n === 1 ? host : `${host}-${n}`, baseUrl: url, apiKey: keys.length === 1 ? keys[0]! : keys[index]!, weight: 1, maxConcurrent: null };
  });
}

/**
 * Resolves one vendor's entry in place: `deployments` filled (or checked), `baseUrl`/`apiKey` the
 * first deployment's. Throws a start-up error naming the setting (or variable) at fault.
 */
export function resolveVendorDeployments(vendor: VendorId, entry: VendorEntry): void {
  let list: VendorDeployment[];
  if (entry.deployments.length > 0) {
    // A configuration already resolved (baseUrl and apiKey are its first deployment's) reloads as it is.
    const first = entry.deployments[0]!;
    const resolved = entry.baseUrl === vendorBaseUrl(vendor, first.baseUrl) && entry.apiKey === first.apiKey;
    if (!resolved && (entry.baseUrl !== null || entry.apiKey !== null)) {
      throw new Error(
        `config: vendors.${vendor} sets both deployments and baseUrl/apiKey (${envName(vendor, 'BASE_URL')}, ${envName(vendor, 'API_KEY')}); write one form`,
      );
    }
    const names = new Set<string>();
    list = entry.deployments.map((deployment) => {
      if (names.has(deployment.name)) throw new Error(`config: vendors.${vendor}.deployments names ${JSON.stringify(deployment.name)} twice`);
      names.add(deployment.name);
      return {
        name: deployment.name,
        baseUrl: vendorBaseUrl(vendor, deployment.baseUrl),
        apiKey: deployment.apiKey,
        weight: deployment.weight ?? 1,
        maxConcurrent: deployment.maxConcurrent ?? null,
      };
    });
  } else if (entry.baseUrl !== null) {
    list = fromLists(vendor, entry.baseUrl, entry.apiKey);
    // A list without a key leaves the vendor unconfigured, as a single URL without one always did.
    if (list.length === 0) {
      entry.baseUrl = vendorBaseUrl(vendor, splitList(entry.baseUrl)[0]!);
      return;
    }
  } else {
    return;
  }
  entry.deployments = list;
  entry.baseUrl = list[0]!.baseUrl;
  entry.apiKey = list[0]!.apiKey;
}

/** A vendor's deployments after loading (empty: not configured). */
export function deploymentsOf(
  vendors: Readonly<Record<VendorId, { readonly deployments: readonly unknown[] }>>,
  vendor: VendorId,
): readonly VendorDeployment[] {
  return vendors[vendor].deployments as readonly VendorDeployment[];
}
