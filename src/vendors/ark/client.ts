// The Ark (Seedance) video task API: create a task, read it, cancel it. One undici Agent per client,
// every call bounded (connect, headers, body, total), our key only, and an allow-list of the fields
// we send: nothing the client wrote reaches the vendor except through the mapping below.
// Wire shapes: the Ark video-task API (create, get, and the task JSON), as the simulator speaks it.
import { readBounded, readVendorJson, retryAfterSeconds, vendorAgent } from '../vendor-http.js';
import { type Agent, request, type Dispatcher } from 'undici';

/** What we ask Ark for: built from a validated, normalised request only. */
export interface ArkCreateInput {
  readonly vendorModel: string;
  readonly prompt?: string;
  readonly resolution: string;
  readonly ratio: string;
  readonly durationS: number;
  readonly generateAudio: boolean;
  readonly seed?: number;
  readonly firstFrameUrl?: string;
  readonly lastFrameUrl?: string;
  readonly referenceImageUrls?: readonly string[];
  readonly referenceVideoUrls?: readonly string[];
  readonly referenceAudioUrls?: readonly string[];
}

export type ArkTaskStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'expired';

/** A task as read back; fields the vendor did not send stay undefined (never 0). */
export interface ArkTask {
  readonly id: string;
  readonly status: ArkTaskStatus;
  readonly progress?: number;
  readonly videoUrl?: string;
  readonly durationS?: number;
  readonly resolution?: string;
  readonly ratio?: string;
  readonly seed?: number;
  readonly error?: { code: string; message: string };
  readonly usage?: { completionTokens?: number; totalTokens?: number };
}

/**
 * Why a call failed. `refused`: the vendor answered 4xx about the request (it will not work if
 * retried as is). `unavailable`: 5xx, 429, our credentials refused, network failure or timeout
 * (may work later). `protocol`: an answer we cannot use. `not_found`: the task is unknown.
 */
export class ArkError extends Error {
  constructor(
    readonly kind: 'refused' | 'unavailable' | 'protocol' | 'not_found',
    message: string,
    readonly status?: number,
    readonly vendorCode?: string,
    readonly retryAfterS?: number,
  ) {
    super(message);
    this.name = 'ArkError';
  }
}

export interface ArkClientOptions {
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly connectTimeoutMs?: number;
  /** Whole call, including the body (default 20 s). */
  readonly timeoutMs?: number;
  readonly connections?: number;
}

const MAX_RESPONSE_BYTES = 1_048_576;
const TASK_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const STATUSES: ReadonlySet<string> = new Set(['queued', 'running', 'succeeded', 'failed', 'cancelled', 'expired']);
// Ark also reads parameters from the prompt text ("--rs 1080p --dur 12", the legacy form). A client
// could use that to get a dearer render than the one we priced, so these flags never reach it as
// flags: their leading dashes are dropped.
const LEGACY_FLAG_RE = /(^|\s)--(rs|rt|dur|duration|seed|cf|wm|fps|frames|resolution|ratio|camerafixed|camera_fixed|watermark)\b/gi;

export function neutralisePrompt(prompt: string): string {
  return prompt.replace(LEGACY_FLAG_RE, '$1$2');
}

/** The create body: only the fields below, in the vendor's names. */
export function arkCreateBody(input: ArkCreateInput): Record<string, unknown> {
  const content: Array<Record<string, unknown>> = [];
  if (input.prompt !== undefined && input.prompt !== '') content.push({ type: 'text', text: neutralisePrompt(input.prompt) });
  if (input.firstFrameUrl !== undefined) content.push({ type: 'image_url', image_url: { url: input.firstFrameUrl }, role: 'first_frame' });
  if (input.lastFrameUrl !== undefined) content.push({ type: 'image_url', image_url: { url: input.lastFrameUrl }, role: 'last_frame' });
  for (const url of input.referenceImageUrls ?? []) content.push({ type: 'image_url', image_url: { url }, role: 'reference_image' });
  for (const url of input.referenceVideoUrls ?? []) content.push({ type: 'video_url', video_url: { url }, role: 'reference_video' });
  for (const url of input.referenceAudioUrls ?? []) content.push({ type: 'audio_url', audio_url: { url }, role: 'reference_audio' });
  const body: Record<string, unknown> = {
    model: input.vendorModel,
    content,
    resolution: input.resolution,
    ratio: input.ratio,
    duration: input.durationS,
    generate_audio: input.generateAudio,
    // Our product has no watermark option; say so rather than take the vendor default.
    watermark: false,
  };
  if (input.seed !== undefined) body.seed = input.seed;
  return body;
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const str = (v: unknown, max = 4096): string | undefined => (typeof v === 'string' && v.length > 0 && v.length <= max ? v : undefined);

/** Reads a GET task answer; throws ArkError('protocol') when it is not a task. */
export function parseTask(raw: unknown): ArkTask {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ArkError('protocol', 'the task answer is not a JSON object');
  const o = raw as Record<string, unknown>;
  const id = str(o.id, 256);
  const status = o.status;
  if (id === undefined || typeof status !== 'string' || !STATUSES.has(status))
    throw new ArkError('protocol', 'the task answer has no id or a status we do not know');
  const content = typeof o.content === 'object' && o.content !== null ? (o.content as Record<string, unknown>) : {};
  const err = typeof o.error === 'object' && o.error !== null ? (o.error as Record<string, unknown>) : undefined;
  const usage = typeof o.usage === 'object' && o.usage !== null ? (o.usage as Record<string, unknown>) : undefined;
  const progress = num(o.progress);
  return {
    id,
    status: status as ArkTaskStatus,
    progress: progress === undefined ? undefined : Math.max(0, Math.min(100, Math.round(progress))),
    videoUrl: str(content.video_url),
    durationS: num(o.duration),
    resolution: str(o.resolution, 40),
    ratio: str(o.ratio, 40),
    seed: typeof o.seed === 'number' && Number.isSafeInteger(o.seed) ? o.seed : undefined,
    error: err ? { code: str(err.code, 200) ?? 'unknown', message: str(err.message, 1000) ?? 'The vendor reported a failure.' } : undefined,
    usage: usage ? { completionTokens: num(usage.completion_tokens), totalTokens: num(usage.total_tokens) } : undefined,
  };
}

/** A request that failed before any answer (refused, unreachable, timed out). */
export function unreachable(error: unknown): ArkError {
  return new ArkError('unavailable', `the vendor could not be reached: ${(error as Error).message}`);
}

export class ArkClient {
  private readonly agent: Agent;
  private readonly base: string;
  /** The configured base URL's origin: results served from it are the vendor's own (downloadOwnResult). */
  private readonly origin: string;
  private readonly timeoutMs: number;

  constructor(private readonly opts: ArkClientOptions) {
    this.base = opts.baseUrl.endsWith('/') ? opts.baseUrl.slice(0, -1) : opts.baseUrl;
    this.origin = new URL(this.base).origin;
    this.timeoutMs = opts.timeoutMs ?? 20_000;
    this.agent = vendorAgent({ timeoutMs: this.timeoutMs, connectTimeoutMs: opts.connectTimeoutMs, connections: opts.connections });
  }

  /** Creates a task; returns its id. */
  async createTask(input: ArkCreateInput): Promise<string> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.sendCreate(input, this.timeoutMs);
    } catch (e) {
      throw unreachable(e);
    }
    return this.readCreate(res);
  }

  /**
   * The create request, its answer unread: a vendor pool's try loop (vendors/pool/try-loop.ts)
   * looks at the status before deciding whether it may move on. Throws the transport's error as is.
   */
  sendCreate(input: ArkCreateInput, timeoutMs: number): Promise<Dispatcher.ResponseData> {
    return this.send('POST', '/contents/generations/tasks', arkCreateBody(input), timeoutMs);
  }

  /** A create's answer: the task id, or ArkError. */
  async readCreate(res: Dispatcher.ResponseData): Promise<string> {
    const { status, body } = await this.answer('POST', res);
    const id = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).id : undefined;
    if (typeof id !== 'string' || !TASK_ID_RE.test(id)) throw new ArkError('protocol', `the create answer (${status}) carries no task id`, status);
    return id;
  }

  async getTask(id: string): Promise<ArkTask> {
    if (!TASK_ID_RE.test(id)) throw new ArkError('protocol', 'bad task id');
    const { body } = await this.call('GET', `/contents/generations/tasks/${encodeURIComponent(id)}`);
    // An answer for another task is refused (it must never be settled as ours), except an id
    // masked with '*' (recorded answers anonymise ids: cgt-2025******-****), which no real task id
    // has: that one is taken as the answer for the task the path names.
    const task = parseTask(body);
    if (task.id !== id && !task.id.includes('*')) throw new ArkError('protocol', 'the vendor answered for another task');
    return { ...task, id };
  }

  /** Best effort: Ark cancels only queued tasks. */
  async cancelTask(id: string): Promise<void> {
    if (!TASK_ID_RE.test(id)) return;
    await this.call('DELETE', `/contents/generations/tasks/${encodeURIComponent(id)}`);
  }

  /**
   * Downloads a result the vendor serves from its own API origin (the configured base URL's scheme,
   * host and port), or answers undefined for any other URL. Why: the operator chose that origin
   * (our API key already goes there), so the public-https rules for URLs from elsewhere
   * (safeFetch) do not apply to it; a local or on-premises Ark serves results that way, over http
   * on a private address. Results on other hosts (Ark's object store) go through safeFetch. No
   * key is sent, no redirect is followed, and the size and total time are bounded.
   */
  async downloadOwnResult(
    url: URL,
    options: { maxBytes: number; timeoutMs: number; accept: string },
  ): Promise<{ bytes: Buffer; contentType: string } | undefined> {
    if (url.origin !== this.origin || url.username !== '' || url.password !== '') return undefined;
    const res = await request(url, {
      method: 'GET',
      dispatcher: this.agent,
      headers: { accept: options.accept, 'accept-encoding': 'identity' },
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    if (res.statusCode !== 200) {
      res.body.destroy();
      throw new Error(`the vendor's result URL answered ${res.statusCode}`);
    }
    const bytes = await readBounded(res.body, options.maxBytes, options.timeoutMs);
    const ct = res.headers['content-type'];
    return { bytes, contentType: (Array.isArray(ct) ? ct[0] : ct) ?? '' };
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private async call(method: Dispatcher.HttpMethod, path: string, json?: unknown): Promise<{ status: number; body: unknown }> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.send(method, path, json, this.timeoutMs);
    } catch (e) {
      throw unreachable(e);
    }
    return this.answer(method, res);
  }

  private send(method: Dispatcher.HttpMethod, path: string, json: unknown, timeoutMs: number): Promise<Dispatcher.ResponseData> {
    return request(this.base + path, {
      method,
      dispatcher: this.agent,
      headers: {
        authorization: `Bearer ${this.opts.apiKey}`,
        accept: 'application/json',
        'accept-encoding': 'identity', // we parse the bytes as they come: no compressed answers
        ...(json === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: json === undefined ? undefined : JSON.stringify(json),
      signal: AbortSignal.timeout(Math.max(1, Math.floor(Math.min(this.timeoutMs, timeoutMs)))),
    });
  }

  private async answer(method: Dispatcher.HttpMethod, res: Dispatcher.ResponseData): Promise<{ status: number; body: unknown }> {
    let body: unknown;
    try {
      body = await readVendorJson(res.body, MAX_RESPONSE_BYTES);
    } catch (e) {
      throw new ArkError('unavailable', `the vendor answer could not be read: ${(e as Error).message}`, res.statusCode);
    }
    const s = res.statusCode;
    if (s >= 200 && s < 300) {
      if (body === undefined && method !== 'DELETE') throw new ArkError('protocol', `the vendor answered ${s} without JSON`, s);
      return { status: s, body };
    }
    const verr = typeof body === 'object' && body !== null ? ((body as Record<string, unknown>).error as Record<string, unknown> | undefined) : undefined;
    const code = typeof verr?.code === 'string' ? verr.code.slice(0, 200) : undefined;
    const msg = typeof verr?.message === 'string' ? verr.message.slice(0, 500) : `status ${s}`;
    if (s === 429 || s >= 500 || s === 401 || s === 403) {
      throw new ArkError('unavailable', `the vendor answered ${s}: ${msg}`, s, code, retryAfterSeconds(res.headers['retry-after']));
    }
    if (s === 404) throw new ArkError('not_found', `the vendor answered 404: ${msg}`, s, code);
    throw new ArkError('refused', `the vendor refused the request (${s}): ${msg}`, s, code);
  }
}
