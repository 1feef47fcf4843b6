// JSON request bodies: content type, parse, and the shape checks every route shares.
// Hostile JSON (deep nesting, __proto__ keys, 1e309, an object of a million keys) must be a 400,
// never a 5xx in a later step nor a stall of the serving thread: json-shape.ts checks the raw bytes
// before the parse (json-parse.ts), and a large body is parsed on a worker thread (json-parse-pool.ts).
import { ApiError } from '../errors.js';
import type { HttpContext } from './http-context.js';
import { parseJsonObject } from './json-parse.js';
import { PARSE_INLINE_BYTES, parseJsonObjectOffThread } from './json-parse-pool.js';

/** `application/json`, optionally with parameters such as charset=utf-8. */
export function isJsonContentType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const semi = contentType.indexOf(';');
  const base = (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
  if (base !== 'application/json') return false;
  if (semi === -1) return true;
  const cs = /charset\s*=\s*"?([^";\s]+)/i.exec(contentType.slice(semi));
  return !cs || cs[1]!.toLowerCase() === 'utf-8' || cs[1]!.toLowerCase() === 'utf8';
}

/** Content type check, then the collected body, parsed (off the event loop when large: json-parse-pool.ts). */
export async function readJsonObject(ctx: HttpContext): Promise<Record<string, unknown>> {
  if (!isJsonContentType(ctx.header('content-type'))) {
    throw new ApiError('unsupported_media_type', { message: 'The body must be sent as Content-Type: application/json.' });
  }
  const body = await ctx.readBody();
  return body.byteLength <= PARSE_INLINE_BYTES ? parseJsonObject(body) : parseJsonObjectOffThread(body);
}
