// The parse of a JSON body that must be an object, after the structural pre-check of its bytes
// (json-shape.ts): what it returns needs no walk of its own. Runs on the event loop for small bodies
// and on the parse pool's thread for large ones (json-parse-pool.ts).
import { ApiError } from '../errors.js';
import { checkJsonShape } from './json-shape.js';

// Stateless when not streaming, so one instance serves every request.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Parses a body that must be a JSON object. Throws ApiError with the codes of docs/api/errors.md. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  checkJsonShape(body);
  return parseCheckedJsonObject(body);
}

/** parseJsonObject of a body whose shape checkJsonShape has passed. */
export function parseCheckedJsonObject(body: Buffer): Record<string, unknown> {
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
  return v as Record<string, unknown>;
}
