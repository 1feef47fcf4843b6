// JSON request bodies: content type, parse, and the shape checks every route shares.
// Hostile JSON (deep nesting, __proto__ keys, 1e309) must be a 400, never a 5xx in a later step.
import { ApiError } from '../errors.js';
import type { HttpContext } from './http-context.js';

export const MAX_JSON_DEPTH = 64;
// Stateless when not streaming, so one instance serves every request.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** `application/json`, optionally with parameters such as charset=utf-8. */
export function isJsonContentType(v: string | undefined): boolean {
  if (v === undefined) return false;
  const semi = v.indexOf(';');
  const base = (semi === -1 ? v : v.slice(0, semi)).trim().toLowerCase();
  if (base !== 'application/json') return false;
  if (semi === -1) return true;
  const cs = /charset\s*=\s*"?([^";\s]+)/i.exec(v.slice(semi));
  return !cs || cs[1]!.toLowerCase() === 'utf-8' || cs[1]!.toLowerCase() === 'utf8';
}

/**
 * Walks the parsed value once, iteratively (no recursion to overflow), refusing what later code
 * should never see: nesting beyond MAX_JSON_DEPTH, non-finite numbers, and prototype-named keys.
 */
function checkShape(root: unknown): void {
  const stack: Array<[unknown, number]> = [[root, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new ApiError('invalid_json', { message: 'A number in the body is out of range.' });
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    // Valid JSON, but not a body we accept (invalid_json is for text that is not JSON at all).
    if (depth >= MAX_JSON_DEPTH) throw new ApiError('invalid_body', { message: `The body is nested deeper than ${MAX_JSON_DEPTH} levels.` });
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const e = v[i];
        if (typeof e === 'object' || typeof e === 'number') stack.push([e, depth + 1]);
      }
    } else {
      for (const k in v) {
        if (k === '__proto__' || k === 'constructor' || k === 'prototype') {
          throw new ApiError('invalid_body', { message: `Keys named ${k} are not accepted.`, param: k });
        }
        const e = (v as Record<string, unknown>)[k];
        if (typeof e === 'object' || typeof e === 'number') stack.push([e, depth + 1]);
      }
    }
  }
}

/** Parses a body that must be a JSON object. Throws ApiError with the codes of docs/api/errors.md. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let text: string;
  try {
    text = utf8.decode(body); // ignoreBOM keeps a BOM in the text, so JSON.parse refuses it
  } catch {
    throw new ApiError('invalid_json', { message: 'The body is not valid UTF-8.' });
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ApiError('invalid_json', { message: `The body is not valid JSON: ${(e as Error).message.slice(0, 200)}` });
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ApiError('invalid_body');
  checkShape(v);
  return v as Record<string, unknown>;
}

/** Content type check, then the collected body, parsed. */
export async function readJsonObject(ctx: HttpContext): Promise<Record<string, unknown>> {
  if (!isJsonContentType(ctx.header('content-type'))) {
    throw new ApiError('unsupported_media_type', { message: 'The body must be sent as Content-Type: application/json.' });
  }
  return parseJsonObject(await ctx.readBody());
}
