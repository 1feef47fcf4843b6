// Where printed links point (console sign-in links from `inkgate console link` and `npm run demo`):
// one rule for both, and the setting it came from, so the operator can tell a guess from a setting.
import type { Config } from './config.js';

export interface LinkBase {
  /** No trailing slash: a path such as /console/signin is appended as is. */
  readonly url: string;
  /** The setting the URL came from, as the operator sets it. */
  readonly source: 'INKGATE_CONSOLE_URL' | 'INKGATE_PUBLIC_URL' | 'INKGATE_HOST/INKGATE_PORT' | 'listener';
}

/**
 * The base of a console link: console.url (INKGATE_CONSOLE_URL, a console served under another
 * name), else server.publicUrl (INKGATE_PUBLIC_URL), else the address this process listens on when
 * it is the gateway (`listening`, its real port when port 0 was asked for), else http://host:port of
 * the configuration: the last is a guess, right only when clients reach the gateway directly.
 */
export function consoleLinkBase(cfg: Config, listening?: string): LinkBase {
  if (cfg.console.url !== null) return { url: cfg.console.url, source: 'INKGATE_CONSOLE_URL' };
  if (cfg.server.publicUrl !== null) return { url: cfg.server.publicUrl, source: 'INKGATE_PUBLIC_URL' };
  if (listening !== undefined) return { url: listening.replace(/\/+$/, ''), source: 'listener' };
  const host = cfg.server.host.includes(':') ? `[${cfg.server.host}]` : cfg.server.host;
  return { url: `http://${host}:${cfg.server.port}`, source: 'INKGATE_HOST/INKGATE_PORT' };
}
