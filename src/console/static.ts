// The console's two static files, read once at start-up and served from memory with a strong
// ETag. They live beside the source (src/console/assets/) and ship with the package like the
// migrations do.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../config/config.js';
import type { HttpContext } from '../server/http-context.js';
import { SECURITY_HEADERS } from './html.js';

export const ASSETS_DIR = join(PROJECT_ROOT, 'src', 'console', 'assets');
/**
 * Each file's type and, for the favicon, a long cache: browsers ask every page for /favicon.ico,
 * and it never changes within a release (the ETag answers a revalidation after a week).
 */
const FILES: Readonly<Record<string, { type: string; cache?: string }>> = {
  'console.css': { type: 'text/css; charset=utf-8' },
  'console.js': { type: 'text/javascript; charset=utf-8' },
  'favicon.svg': { type: 'image/svg+xml', cache: 'public, max-age=604800' },
};
/** The path browsers ask for without being told; served the SVG (every current browser takes it). */
export const FAVICON_PATH = '/favicon.ico';

interface Asset {
  readonly body: Buffer;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly etag: string;
}

let assets: Map<string, Asset> | undefined;

function load(): Map<string, Asset> {
  const m = new Map<string, Asset>();
  for (const [name, f] of Object.entries(FILES)) {
    const body = readFileSync(join(ASSETS_DIR, name));
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"`;
    const headers = [
      ...SECURITY_HEADERS,
      ['Content-Type', f.type] as const,
      ['ETag', etag] as const,
      ...(f.cache ? [['Cache-Control', f.cache] as const] : []),
    ];
    m.set(name, { body, headers, etag });
  }
  return m;
}

export function serveStatic(ctx: HttpContext, name: string): void {
  assets ??= load();
  const a = assets.get(name);
  if (!a || (ctx.method !== 'GET' && ctx.method !== 'HEAD')) {
    ctx.startStream(404, [...SECURITY_HEADERS, ['Content-Type', 'text/plain; charset=utf-8']]);
    ctx.end('not found');
    return;
  }
  const headers = a.headers;
  if (ctx.header('if-none-match') === a.etag) return ctx.sendEmpty(304, headers);
  if (ctx.method === 'HEAD') return ctx.sendHead(200, headers, a.body.length);
  ctx.startStream(200, headers);
  ctx.end(a.body);
}
