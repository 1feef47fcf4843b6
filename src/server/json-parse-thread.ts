// The JSON parse pool's worker thread (json-parse-pool.ts): checks the shape of one large body at a
// time, off the event loop that serves every other client, then parses it and posts the object
// back when that clone is cheap (few keys: the body is mostly text), or answers "checked" and
// leaves the parse to the event loop (many keys: there, JSON.parse costs less than the clone back).
import { parentPort } from 'node:worker_threads';
import { ApiError } from '../errors.js';
import { parseCheckedJsonObject } from './json-parse.js';
import { checkJsonShape } from './json-shape.js';

/**
 * Bodies of up to this many object keys are parsed here and cloned back. Measured on the reference
 * machine: the clone back costs about what a parse costs per string, but several times more per
 * key (96,000 keys in objects of 100: ~20x the parse), so a body of many keys is parsed where it is used.
 */
export const CLONE_MAX_KEYS = 5_000;

export interface ParseJob {
  readonly id: number;
  readonly body: Uint8Array;
}

export type ParseAnswer =
  | { readonly id: number; readonly value: Record<string, unknown> }
  | { readonly id: number; readonly checked: true }
  | { readonly id: number; readonly refusal: { readonly code: ApiError['code']; readonly param: string | undefined; readonly message: string } };

parentPort!.on('message', (job: ParseJob) => {
  try {
    const body = Buffer.from(job.body.buffer, job.body.byteOffset, job.body.byteLength);
    const shape = checkJsonShape(body);
    if (shape.keys > CLONE_MAX_KEYS) {
      parentPort!.postMessage({ id: job.id, checked: true } satisfies ParseAnswer);
      return;
    }
    parentPort!.postMessage({ id: job.id, value: parseCheckedJsonObject(body) } satisfies ParseAnswer);
  } catch (e) {
    const err = e instanceof ApiError ? e : new ApiError('invalid_json');
    parentPort!.postMessage({ id: job.id, refusal: { code: err.code, param: err.param, message: err.message } } satisfies ParseAnswer);
  }
});
