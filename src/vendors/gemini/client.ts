// The Gemini image API: one generateContent call per image (the answer carries the image inline,
// base64). One undici Agent per client, every call bounded (connect, headers, body size, total),
// our key only, and an allow-list of the fields we send: nothing the client wrote reaches the
// vendor except through the mapping below.
// Wire shapes: the Gemini generateContent API for images, as the simulator speaks it.
import { readVendorJson, retryAfterSeconds, vendorAgent } from '../vendor-http.js';
import { type Agent, request, type Dispatcher } from 'undici';

/** A reference image, already downloaded by us (Gemini takes references inline). */
export interface GeminiInlineImage {
  readonly mimeType: string;
  readonly data: Buffer;
}

/** What we ask Gemini for: built from a validated, normalised request only. */
export interface GeminiImageInput {
  readonly vendorModel: string;
  readonly prompt: string;
  readonly imageSize: string;
  readonly aspectRatio: string;
  readonly seed?: number;
  readonly references?: readonly GeminiInlineImage[];
}

/** Token counts as the vendor reported them; a field it did not send stays undefined (never 0). */
export interface GeminiUsage {
  readonly promptTokens?: number;
  readonly candidatesTokens?: number;
  readonly thoughtsTokens?: number;
  readonly totalTokens?: number;
}

export type GeminiImageResult =
  | { readonly kind: 'image'; readonly bytes: Buffer; readonly mimeType: string; readonly responseId?: string; readonly usage: GeminiUsage }
  /** The vendor refused on safety grounds (finishReason IMAGE_SAFETY/SAFETY/…, or promptFeedback.blockReason). */
  | { readonly kind: 'blocked'; readonly reason: string; readonly message?: string; readonly responseId?: string; readonly usage: GeminiUsage }
  /** Finished without an image and without a safety reason (e.g. the model answered text only). */
  | { readonly kind: 'no_image'; readonly reason: string; readonly responseId?: string; readonly usage: GeminiUsage };

/**
 * Why a call failed. `refused`: 4xx about the request (it will not work if retried as is).
 * `unavailable`: 5xx, 429, our credentials refused, network failure or timeout (may work later).
 * `protocol`: an answer we cannot use.
 */
export class GeminiError extends Error {
  constructor(
    readonly kind: 'refused' | 'unavailable' | 'protocol',
    message: string,
    readonly status?: number,
    readonly vendorStatus?: string,
    readonly retryAfterS?: number,
  ) {
    super(message);
    this.name = 'GeminiError';
  }
}

export interface GeminiClientOptions {
  /** e.g. https://generativelanguage.googleapis.com/v1beta */
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly connectTimeoutMs?: number;
  /** Whole call, including the body (default 180 s: a 4K image with thinking takes a while). */
  readonly timeoutMs?: number;
  /** Largest answer read (default 96 MiB: a 4K image base64-encoded, plus thought parts). */
  readonly maxResponseBytes?: number;
  readonly connections?: number;
}

const MODEL_RE = /^[A-Za-z0-9._-]{1,100}$/;
// Finish reasons that mean "refused for content": the generation failed on policy, not on us.
const SAFETY_REASONS: ReadonlySet<string> = new Set([
  'IMAGE_SAFETY',
  'SAFETY',
  'PROHIBITED_CONTENT',
  'BLOCKLIST',
  'SPII',
  'IMAGE_PROHIBITED_CONTENT',
  'RECITATION',
  'IMAGE_RECITATION',
]);

/** The generateContent body: only the fields below, in the vendor's names. */
export function geminiRequestBody(input: GeminiImageInput): Record<string, unknown> {
  const parts: Array<Record<string, unknown>> = [{ text: input.prompt }];
  for (const r of input.references ?? []) parts.push({ inlineData: { mimeType: r.mimeType, data: r.data.toString('base64') } });
  const generationConfig: Record<string, unknown> = {
    responseModalities: ['TEXT', 'IMAGE'],
    imageConfig: { aspectRatio: input.aspectRatio, imageSize: input.imageSize },
  };
  if (input.seed !== undefined && input.seed >= 0) generationConfig.seed = input.seed;
  return { contents: [{ role: 'user', parts }], generationConfig };
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
const str = (v: unknown, max = 4096): string | undefined => (typeof v === 'string' && v.length > 0 && v.length <= max ? v : undefined);
const obj = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
/**
 * A field by its JSON name (lowerCamelCase, what the REST API writes) or its proto name
 * (snake_case, which the API also accepts and which servers built from the proto or the Python
 * types write): `f(object, 'inlineData')` also finds `inline_data`.
 */
const f = (object: Record<string, unknown> | undefined, camel: string): unknown => {
  if (object === undefined) return undefined;
  const v = object[camel];
  return v !== undefined ? v : object[camel.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())];
};

export function parseUsage(raw: unknown): GeminiUsage {
  const u = obj(raw);
  return {
    promptTokens: num(f(u, 'promptTokenCount')),
    candidatesTokens: num(f(u, 'candidatesTokenCount')),
    thoughtsTokens: num(f(u, 'thoughtsTokenCount')),
    totalTokens: num(f(u, 'totalTokenCount')),
  };
}

/** Reads a generateContent answer; throws GeminiError('protocol') when it is not one. */
export function parseImageResponse(raw: unknown): GeminiImageResult {
  const o = obj(raw);
  if (o === undefined) throw new GeminiError('protocol', 'the answer is not a JSON object');
  const usage = parseUsage(f(o, 'usageMetadata'));
  const responseId = str(f(o, 'responseId'), 256);
  const candidates = Array.isArray(o.candidates) ? o.candidates : [];
  const feedback = obj(f(o, 'promptFeedback'));
  const blockReason = str(f(feedback, 'blockReason'), 100);
  if (candidates.length === 0) {
    if (blockReason !== undefined) return { kind: 'blocked', reason: blockReason, message: str(f(feedback, 'blockReasonMessage'), 1000), responseId, usage };
    throw new GeminiError('protocol', 'the answer has no candidates');
  }
  const c = obj(candidates[0]) ?? {};
  const finish = str(f(c, 'finishReason'), 100) ?? 'UNKNOWN';
  const parts = Array.isArray(obj(c.content)?.parts) ? (obj(c.content)!.parts as unknown[]) : [];
  // The image is the last non-thought inline image part (interim thought images carry thought: true).
  let image: { mimeType: string; data: string } | undefined;
  for (const p of parts) {
    const part = obj(p);
    if (part === undefined || part.thought === true) continue;
    const inline = obj(f(part, 'inlineData'));
    const mimeType = str(f(inline, 'mimeType'), 100);
    const data = typeof inline?.data === 'string' ? inline.data : undefined;
    if (mimeType !== undefined && /^image\/[a-z0-9.+-]{1,60}$/.test(mimeType) && data !== undefined && data.length > 0) image = { mimeType, data };
  }
  if (image !== undefined) {
    const bytes = Buffer.from(image.data, 'base64');
    if (bytes.length === 0) throw new GeminiError('protocol', 'the image part is empty');
    return { kind: 'image', bytes, mimeType: image.mimeType, responseId, usage };
  }
  if (SAFETY_REASONS.has(finish) || blockReason !== undefined) {
    return { kind: 'blocked', reason: SAFETY_REASONS.has(finish) ? finish : blockReason!, message: str(f(c, 'finishMessage'), 1000), responseId, usage };
  }
  return { kind: 'no_image', reason: finish, responseId, usage };
}

/** A request that failed before any answer (refused, unreachable, timed out), or a bad model id. */
export function geminiUnreachable(error: unknown): GeminiError {
  if (error instanceof GeminiError) return error;
  return new GeminiError('unavailable', `the vendor could not be reached: ${(error as Error).message}`);
}

export class GeminiClient {
  private readonly agent: Agent;
  private readonly base: string;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number;

  constructor(private readonly opts: GeminiClientOptions) {
    this.base = opts.baseUrl.endsWith('/') ? opts.baseUrl.slice(0, -1) : opts.baseUrl;
    this.timeoutMs = opts.timeoutMs ?? 180_000;
    this.maxResponseBytes = opts.maxResponseBytes ?? 96 * 1024 * 1024;
    this.agent = vendorAgent({ timeoutMs: this.timeoutMs, connectTimeoutMs: opts.connectTimeoutMs, connections: opts.connections });
  }

  /** One image. Resolves with the image or the vendor's refusal; throws GeminiError when the call itself failed. */
  async generateImage(input: GeminiImageInput): Promise<GeminiImageResult> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.sendImage(input, this.timeoutMs);
    } catch (e) {
      throw geminiUnreachable(e);
    }
    return this.readImage(res);
  }

  /**
   * The generateContent request, its answer unread: a vendor pool's try loop
   * (vendors/pool/try-loop.ts) looks at the status before deciding whether it may move on.
   * Throws GeminiError('protocol') for a bad model id, else the transport's error as is.
   */
  sendImage(input: GeminiImageInput, timeoutMs: number): Promise<Dispatcher.ResponseData> {
    if (!MODEL_RE.test(input.vendorModel)) return Promise.reject(new GeminiError('protocol', 'bad vendor model id'));
    return request(`${this.base}/models/${input.vendorModel}:generateContent`, {
      method: 'POST',
      dispatcher: this.agent,
      // accept-encoding identity: we parse the bytes as they come, so no compressed answers.
      headers: { 'x-goog-api-key': this.opts.apiKey, accept: 'application/json', 'accept-encoding': 'identity', 'content-type': 'application/json' },
      body: JSON.stringify(geminiRequestBody(input)),
      signal: AbortSignal.timeout(Math.max(1, Math.floor(Math.min(this.timeoutMs, timeoutMs)))),
    });
  }

  /** A generateContent answer: the image or the vendor's refusal; GeminiError when the call failed. */
  async readImage(res: Dispatcher.ResponseData): Promise<GeminiImageResult> {
    return parseImageResponse(await this.answer(res));
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private async answer(res: Dispatcher.ResponseData): Promise<unknown> {
    let body: unknown;
    try {
      body = await readVendorJson(res.body, this.maxResponseBytes);
    } catch (e) {
      throw new GeminiError('unavailable', `the vendor answer could not be read: ${(e as Error).message}`, res.statusCode);
    }
    const s = res.statusCode;
    if (s >= 200 && s < 300) {
      if (body === undefined) throw new GeminiError('protocol', `the vendor answered ${s} without JSON`, s);
      return body;
    }
    // google.rpc.Status: {"error": {"code": 400, "message": "…", "status": "INVALID_ARGUMENT"}}
    const verr = obj(obj(body)?.error);
    const status = str(verr?.status, 100);
    const msg = str(verr?.message, 500) ?? `status ${s}`;
    if (s === 429 || s >= 500 || s === 401 || s === 403) {
      throw new GeminiError('unavailable', `the vendor answered ${s}: ${msg}`, s, status, retryAfterSeconds(res.headers['retry-after']));
    }
    throw new GeminiError('refused', `the vendor refused the request (${s}${status ? ' ' + status : ''}): ${msg}`, s, status);
  }
}
