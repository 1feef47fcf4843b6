// The console's two static files, read once at start-up and served from memory with a strong
// ETag. They live beside the source (src/console/assets/) and ship with the package like the
// migrations do.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../config/config.js';
import type { HttpContext } from '../server/http-context.js';
import { SECURITY_HEADERS } from './html.js';

const ASSETS_DIR = join(PROJECT_ROOT, 'src', 'console', 'assets');
const TYPES: Readonly<Record<string, string>> = { 'console.css': 'text/css; charset=utf-8', 'console.js': 'text/javascript; charset=utf-8' };

interface Asset {
  readonly body: Buffer;
  readonly type: string;
  readonly etag: string;
}

let assets: Map<string, Asset> | undefined;

function load(): Map<string, Asset> {
  const m = new Map<string, Asset>();
  for (const [name, type] of Object.entries(TYPES)) {
    const body = readFileSync(join(ASSETS_DIR, name));
    m.set(name, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"` });
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
  const headers = [...SECURITY_HEADERS, ['Content-Type', a.type] as const, ['ETag', a.etag] as const];
  if (ctx.header('if-none-match') === a.etag) return ctx.sendEmpty(304, headers);
  if (ctx.method === 'HEAD') return ctx.sendHead(200, headers, a.body.length);
  ctx.startStream(200, headers);
  ctx.end(a.body);
}
