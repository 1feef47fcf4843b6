// Large JSON bodies are checked off the event loop, and parsed there when that pays. On the
// reference machine (2 cores, Node 20) the shape check, UTF-8 decode and JSON.parse of an ordinary
// 4 MiB body take ~6-20 ms, and of a 4 MiB body of many small values (inside json-shape.ts's
// limits) 100-250 ms: on the serving thread, every other client would wait that long. A body above
// PARSE_INLINE_BYTES goes to one worker thread, which checks its shape (refusals never reach the
// event loop) and, for a body of few keys (mostly text), parses it and clones the object back: the
// event loop pays only the copy there and the clone, a fraction of the parse. A body of many keys
// is parsed on the event loop once checked: its clone back would cost more than its parse there
// (json-parse-thread.ts, docs/performance-history.md#large-bodies).
import { ApiError } from '../errors.js';
import { OneWorker } from '../util/one-worker.js';
import { parseCheckedJsonObject } from './json-parse.js';
import type { ParseAnswer, ParseJob } from './json-parse-thread.js';

/** Bodies up to this size are parsed in place (a few ms at worst: ~1 ms of ordinary JSON). */
export const PARSE_INLINE_BYTES = 64 * 1024;
/** Bytes waiting for (or in) the worker beyond this are refused 503 (sixteen full-size text bodies already queue). */
const MAX_QUEUED_BYTES = 64 * 1024 * 1024;
/** A parse takes well under a second; past this the job fails (and the worker is replaced). */
const PARSE_TIMEOUT_MS = 30_000;

/** The body is each job's context: a body of many keys comes back "checked" and is parsed here. */
class JsonParsePool extends OneWorker<ParseJob, ParseAnswer, Record<string, unknown>, Buffer> {
  constructor() {
    super({
      base: import.meta.url,
      thread: 'json-parse-thread',
      maxQueued: MAX_QUEUED_BYTES,
      timeoutMs: PARSE_TIMEOUT_MS,
      busyMessage: 'Too many large bodies are being read on this instance; retry.',
      timeoutMessage: `a JSON parse took more than ${PARSE_TIMEOUT_MS} ms`,
      exitMessage: 'the JSON parse thread exited',
    });
  }

  parse(body: Buffer): Promise<Record<string, unknown>> {
    return this.run(body.byteLength, body, (id) => {
      // A copy of exactly the body goes over (the body stays here: a body of many keys is parsed here).
      const job: ParseJob = { id, body: new Uint8Array(body) };
      return { job, transfer: [job.body.buffer as ArrayBuffer] };
    });
  }

  protected answer(message: ParseAnswer, body: Buffer): Record<string, unknown> {
    if ('value' in message) return message.value;
    if ('checked' in message) return parseCheckedJsonObject(body);
    throw new ApiError(message.refusal.code, { param: message.refusal.param, message: message.refusal.message });
  }
}

const pool = new JsonParsePool();

/** A large body that must be a JSON object: checked on the worker thread, parsed there or here (above). */
export function parseJsonObjectOffThread(body: Buffer): Promise<Record<string, unknown>> {
  return pool.parse(body);
}
