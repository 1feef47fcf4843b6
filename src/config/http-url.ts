// The one check of an http(s) URL the configuration carries (a vendor's base URL, the public and
// console links, an S3 endpoint). Its refusals reach the start-up log, stderr and the CLI's JSON,
// so they never repeat a value that carries credentials or a query: a token may hide there.

/** The value as a log line or an error may show it: origin and path only; a non-URL only when it cannot hold a secret. */
export function shownUrl(raw: string): string {
  try {
    const url = new URL(raw);
    return url.origin + url.pathname;
  } catch {
    return /[@?#]/.test(raw) ? '(not shown: it may carry credentials)' : raw;
  }
}

/**
 * `raw` parsed as a plain http(s) URL: no credentials, no query, no fragment. Throws an Error that
 * names the setting (`name`) and says what is wrong; `why` says where credentials come from instead.
 */
export function plainHttpUrl(name: string, raw: string, why = ''): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`config: ${name} is not a URL: ${JSON.stringify(shownUrl(raw))}`);
  }
  const shown = JSON.stringify(shownUrl(raw));
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`config: ${name} must be http(s): ${shown}`);
  if (url.username !== '' || url.password !== '') throw new Error(`config: ${name} must carry no credentials${why}: ${shown}`);
  if (url.search !== '' || url.hash !== '') throw new Error(`config: ${name} must have no query or fragment: ${shown}`);
  return url;
}
