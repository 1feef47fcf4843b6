// Ark (Seedance) video task simulator: a real node:http server on 127.0.0.1, port 0, answering
//   POST   /api/v3/contents/generations/tasks        -> {"id":"cgt-…"}
//   GET    /api/v3/contents/generations/tasks/{id}   -> the task, in the shapes of vendors/ark/*.json
//   DELETE /api/v3/contents/generations/tasks/{id}   -> cancels a queued task
// and serving the rendered file (the MP4 fixture) at `content/{id}.mp4`, over HTTPS when `tls` is
// given (the gateway fetches results only over https, through safeFetch), else over the same HTTP server.
//
// Time never passes by itself in tests: a task's state is a function of the simulator's clock
// (`now()`), which is the wall clock plus whatever `advance(ms)` added, or an injected `clock`.
// A task is `queued` for `queueMs`, then `running` until `renderMs` after creation, then done.
//
// Auth: `Authorization: Bearer <apiKey>`, else 401 {"error":{"code":"AuthenticationError",…}}.
// Directives in the prompt text (the `text` content item) choose failures:
//   [[sim:refuse]]          400 InputTextSensitiveContentDetected at create (the vendor refuses the request)
//   [[sim:unavailable]]     503 ServiceUnavailable at create
//   [[sim:ratelimit]]       429 RateLimitExceeded at create, Retry-After: 7
//   [[sim:fail]]            the task ends `failed` (OutputVideoSensitiveContentDetected)
//   [[sim:cancelled]]       the task ends `cancelled`;  [[sim:expired]]  it ends `expired`
//   [[sim:never]]           the task stays `running` forever
//   [[sim:delivered=N]]     the task reports `duration` N (default: the requested duration)
//   [[sim:no-duration]]     the succeeded task carries no `duration` field
//   [[sim:bad-download]]    the result URL answers 500
//   [[sim:get-error=N]]     the first N GETs of the task answer 500
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { resolve } from 'node:path';
import { PROJECT_ROOT } from '../../src/config/config.js';
import { readJsonObject } from '../read-json-body.js';

export const DEFAULT_ARK_SIM_API_KEY = 'ark-sim-key-0000';
export const SAMPLE_MP4_PATH = resolve(PROJECT_ROOT, 'test', 'fixtures', 'video', 'sample.mp4');
const MAX_BODY_BYTES = 1_048_576;
const MAX_TASKS = 100_000;
const TASKS_PATH = '/api/v3/contents/generations/tasks';

export interface ArkSimulatorOptions {
  readonly apiKey?: string;
  /** ms from creation to the end of the render (default 60 s of simulator time). */
  readonly renderMs?: number;
  /** ms a task stays `queued` (default a quarter of renderMs). */
  readonly queueMs?: number;
  /** Simulator time in ms; default the wall clock plus advance(). */
  readonly clock?: () => number;
  /** Serve result files over HTTPS with this certificate (needed for the gateway's safeFetch). */
  readonly tls?: { key: string; cert: string };
  /** The MP4 served as every result (default test/fixtures/video/sample.mp4). */
  readonly videoBytes?: Buffer;
  /** Report `progress` while running (Ark itself does not; off by default). */
  readonly reportProgress?: boolean;
  /** Host name put in result URLs (default 127.0.0.1). */
  readonly contentHost?: string;
}

export interface SimTask {
  readonly id: string;
  readonly model: string;
  readonly createdAtMs: number;
  readonly body: Record<string, unknown>;
  readonly prompt: string;
  readonly directives: Directives;
  cancelled: boolean;
  gets: number;
}

interface Directives {
  fail: boolean;
  cancelled: boolean;
  expired: boolean;
  never: boolean;
  delivered?: number;
  noDuration: boolean;
  badDownload: boolean;
  getErrors: number;
}

export interface ArkSimulator {
  /** Base URL of the API (`…/api/v3`): what INKGATE_ARK_BASE_URL points at. */
  readonly url: string;
  readonly apiKey: string;
  readonly port: number;
  /** host:port of the result file server (for the test allow-list). */
  readonly contentHostPort: string;
  /** Every create body received (parsed), in order. */
  readonly creates: Array<Record<string, unknown>>;
  readonly tasks: ReadonlyMap<string, SimTask>;
  /** Result downloads served. */
  downloads(): number;
  now(): number;
  advance(ms: number): void;
  /** Runs before each create is answered (tests: hold a create in flight). */
  beforeCreate: (() => Promise<void>) | undefined;
  /** Runs before a result file is sent (tests: hold a download in flight). */
  beforeDownload: ((taskId: string) => Promise<void>) | undefined;
  close(): Promise<void>;
}

function parseDirectives(prompt: string): Directives {
  const d: Directives = { fail: false, cancelled: false, expired: false, never: false, noDuration: false, badDownload: false, getErrors: 0 };
  for (const m of prompt.matchAll(/\[\[sim:([a-z-]+)(?:=(\d{1,6}))?\]\]/g)) {
    const name = m[1]!;
    const n = m[2] === undefined ? undefined : Number(m[2]);
    if (name === 'fail') d.fail = true;
    else if (name === 'cancelled') d.cancelled = true;
    else if (name === 'expired') d.expired = true;
    else if (name === 'never') d.never = true;
    else if (name === 'delivered' && n !== undefined) d.delivered = n;
    else if (name === 'no-duration') d.noDuration = true;
    else if (name === 'bad-download') d.badDownload = true;
    else if (name === 'get-error' && n !== undefined) d.getErrors = n;
  }
  return d;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

const arkError = (code: string, message: string, type = 'BadRequest') => ({ error: { code, message, param: '', type } });

/** Checks a create body the way the vendor would; returns a problem or undefined. */
function createProblem(b: Record<string, unknown>): string | undefined {
  if (typeof b.model !== 'string' || b.model === '') return 'model is required';
  if (!Array.isArray(b.content) || b.content.length === 0) return 'content is required';
  for (const item of b.content as unknown[]) {
    if (typeof item !== 'object' || item === null) return 'content item must be an object';
    const t = (item as Record<string, unknown>).type;
    if (!['text', 'image_url', 'video_url', 'audio_url'].includes(String(t))) return `unknown content type ${String(t)}`;
  }
  if (b.duration !== undefined && (!Number.isInteger(b.duration) || (b.duration as number) < 1)) return 'duration is invalid';
  return undefined;
}

export async function startArkSimulator(opts: ArkSimulatorOptions = {}): Promise<ArkSimulator> {
  const ark = new ArkSim(opts);
  const sim = ark.sim;
  const sockets = new Set<Socket>();
  const track = (srv: Server) =>
    srv.on('connection', (s: Socket) => {
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
    });
  const api = createHttpServer((req, res) => {
    ark.handleApi(req, res).catch(() => {
      if (!res.headersSent) sendJson(res, 500, arkError('InternalServiceError', 'simulator failure', 'ServerError'));
      else res.destroy();
    });
  });
  track(api);
  api.listen(0, '127.0.0.1');
  await once(api, 'listening');
  const apiPort = (api.address() as AddressInfo).port;

  let content: Server | undefined;
  let contentPort = apiPort;
  if (opts.tls) {
    content = createHttpsServer({ key: opts.tls.key, cert: opts.tls.cert }, (req, res) => {
      const path = (req.url ?? '/').split('?')[0]!;
      if ((req.method === 'GET' || req.method === 'HEAD') && ark.serveContent(req, res, path)) return;
      sendJson(res, 404, arkError('NotFound', 'no such file'));
    });
    track(content);
    content.listen(0, '127.0.0.1');
    await once(content, 'listening');
    contentPort = (content.address() as AddressInfo).port;
  }
  const contentHost = opts.contentHost ?? '127.0.0.1';
  ark.contentBase = `${opts.tls ? 'https' : 'http'}://${contentHost}:${contentPort}`;

  Object.assign(sim, {
    url: `http://127.0.0.1:${apiPort}/api/v3`,
    port: apiPort,
    contentHostPort: `${contentHost}:${contentPort}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      const closing = [once(api, 'close')];
      api.close();
      if (content) {
        closing.push(once(content, 'close'));
        content.close();
      }
      await Promise.all(closing);
    },
  });
  return sim;
}

/** The simulated vendor: its tasks on its clock, its API and its result files. */
class ArkSim {
  readonly sim: ArkSimulator;
  private readonly apiKey: string;
  private readonly renderMs: number;
  private readonly queueMs: number;
  private readonly now: () => number;
  private readonly video: Buffer;
  private readonly tasks = new Map<string, SimTask>();
  private seq = 0;
  private downloads = 0;
  private offsetMs = 0;
  /** Origin of result files; set once the content server listens. */
  contentBase = '';

  constructor(private readonly opts: ArkSimulatorOptions) {
    this.apiKey = opts.apiKey ?? DEFAULT_ARK_SIM_API_KEY;
    this.renderMs = opts.renderMs ?? 60_000;
    this.queueMs = opts.queueMs ?? Math.floor(this.renderMs / 4);
    this.now = opts.clock ?? (() => Date.now() + this.offsetMs);
    this.video = opts.videoBytes ?? readFileSync(SAMPLE_MP4_PATH);
    this.sim = {
      url: '',
      apiKey: this.apiKey,
      port: 0,
      contentHostPort: '',
      creates: [],
      tasks: this.tasks,
      downloads: () => this.downloads,
      now: this.now,
      advance: (ms: number) => {
        if (opts.clock) throw new Error('advance() needs the simulator clock; advance the injected clock instead');
        this.offsetMs += ms;
      },
      beforeCreate: undefined,
      beforeDownload: undefined,
      close: async () => undefined,
    };
  }

  /** The task as the vendor shows it now: queued, running, then its end. */
  private taskView(t: SimTask): Record<string, unknown> {
    const created = Math.floor(t.createdAtMs / 1000);
    const age = this.now() - t.createdAtMs;
    const base = {
      id: t.id,
      model: t.model,
      status: 'queued' as string,
      content: {} as Record<string, unknown>,
      usage: { completion_tokens: 0, total_tokens: 0 },
      created_at: created,
      updated_at: created,
      service_tier: 'default',
      execution_expires_after: 172800,
    };
    if (t.cancelled) return { ...base, status: 'cancelled', updated_at: Math.floor(this.now() / 1000) };
    if (age < this.queueMs) return base;
    const d = t.directives;
    if (age < this.renderMs || d.never) {
      const running: Record<string, unknown> = { ...base, status: 'running', updated_at: created + Math.floor(this.queueMs / 1000) };
      if (this.opts.reportProgress) running.progress = Math.min(99, Math.floor(((age - this.queueMs) / Math.max(1, this.renderMs - this.queueMs)) * 100));
      return running;
    }
    const updated = created + Math.floor(this.renderMs / 1000);
    if (d.fail) {
      return {
        ...base,
        status: 'failed',
        error: { code: 'OutputVideoSensitiveContentDetected', message: 'The request failed because the output video may contain sensitive information.' },
        updated_at: updated,
      };
    }
    if (d.cancelled) return { ...base, status: 'cancelled', updated_at: updated };
    if (d.expired) return { ...base, status: 'expired', updated_at: updated };
    return this.succeededView(t, created, updated);
  }

  private succeededView(t: SimTask, created: number, updated: number): Record<string, unknown> {
    const d = t.directives;
    const requested = typeof t.body.duration === 'number' ? t.body.duration : 5;
    const duration = d.delivered ?? requested;
    const seed = typeof t.body.seed === 'number' && t.body.seed >= 0 ? t.body.seed : 1000 + (Number(t.id.slice(-4).replace(/\D/g, '')) || 0);
    const ratio = typeof t.body.ratio === 'string' && t.body.ratio !== 'adaptive' ? t.body.ratio : '16:9';
    const tokens = Math.round(duration * 21780);
    const out: Record<string, unknown> = {
      id: t.id,
      model: t.model,
      status: 'succeeded',
      content: { video_url: `${this.contentBase}/content/${t.id}.mp4` },
      usage: { completion_tokens: tokens, total_tokens: tokens },
      created_at: created,
      updated_at: updated,
      seed,
      resolution: typeof t.body.resolution === 'string' ? t.body.resolution : '720p',
      ratio,
      duration,
      framespersecond: 24,
      service_tier: 'default',
      execution_expires_after: 172800,
      generate_audio: t.body.generate_audio !== false,
      draft: false,
      priority: 0,
    };
    if (d.noDuration) delete out.duration;
    return out;
  }

  serveContent(req: IncomingMessage, res: ServerResponse, path: string): boolean {
    const m = /^\/content\/(cgt-[A-Za-z0-9-]+)\.mp4$/.exec(path);
    if (!m) return false;
    const t = this.tasks.get(m[1]!);
    if (!t || t.directives.badDownload) {
      sendJson(res, t ? 500 : 404, arkError(t ? 'InternalServiceError' : 'NotFound', 'no such file', 'ServerError'));
      return true;
    }
    const send = () => {
      this.downloads++;
      res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(this.video.length) });
      res.end(req.method === 'HEAD' ? undefined : this.video);
    };
    if (this.sim.beforeDownload) this.sim.beforeDownload(t.id).then(send, () => res.destroy());
    else send();
    return true;
  }

  async handleApi(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    if ((req.method === 'GET' || req.method === 'HEAD') && !this.opts.tls && this.serveContent(req, res, path)) return;
    if (!path.startsWith(TASKS_PATH)) return sendJson(res, 404, arkError('NotFound', `no route ${path}`));
    if (req.headers.authorization !== `Bearer ${this.apiKey}`) {
      return sendJson(res, 401, arkError('AuthenticationError', 'The API key in the request is missing or invalid.', 'Unauthorized'));
    }
    if (path === TASKS_PATH && req.method === 'POST') return this.create(req, res);
    const m = /^\/api\/v3\/contents\/generations\/tasks\/([A-Za-z0-9._:-]{1,128})$/.exec(path);
    if (!m) return sendJson(res, 404, arkError('NotFound', `no route ${req.method} ${path}`));
    const t = this.tasks.get(m[1]!);
    if (!t) return sendJson(res, 404, arkError('ResourceNotFound', 'The specified task does not exist.', 'NotFound'));
    if (req.method === 'GET') {
      t.gets++;
      if (t.gets <= t.directives.getErrors) return sendJson(res, 500, arkError('InternalServiceError', 'Internal error.', 'ServerError'));
      return sendJson(res, 200, this.taskView(t));
    }
    if (req.method === 'DELETE') {
      if (this.taskView(t).status !== 'queued') return sendJson(res, 400, arkError('InvalidAction', 'Only queued tasks can be cancelled.'));
      t.cancelled = true;
      return sendJson(res, 200, {});
    }
    return sendJson(res, 405, arkError('MethodNotAllowed', 'method not allowed'));
  }

  private async create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonObject(req, MAX_BODY_BYTES);
    if (body === undefined) return sendJson(res, 400, arkError('InvalidParameter', 'The request body is not valid JSON.'));
    this.sim.creates.push(body);
    if (this.sim.beforeCreate) await this.sim.beforeCreate();
    const problem = createProblem(body);
    if (problem) return sendJson(res, 400, arkError('InvalidParameter', `The parameter is invalid: ${problem}`));
    const textItem = (body.content as Array<Record<string, unknown>>).find((c) => c.type === 'text');
    const prompt = typeof textItem?.text === 'string' ? textItem.text : '';
    if (prompt.includes('[[sim:refuse]]'))
      return sendJson(res, 400, arkError('InputTextSensitiveContentDetected', 'The request failed because the input text may contain sensitive information.'));
    if (prompt.includes('[[sim:unavailable]]'))
      return sendJson(res, 503, arkError('ServiceUnavailable', 'The service is temporarily unavailable.', 'ServerError'));
    if (prompt.includes('[[sim:ratelimit]]'))
      return sendJson(res, 429, arkError('RateLimitExceeded', 'Too many requests.', 'TooManyRequests'), { 'retry-after': '7' });
    if (this.tasks.size >= MAX_TASKS) return sendJson(res, 429, arkError('QuotaExceeded', 'Too many tasks.', 'TooManyRequests'));
    const nowMs = this.now();
    const d = new Date(nowMs);
    const stamp = `${d.getUTCFullYear()}${String(d.getUTCMonth() + 1).padStart(2, '0')}${String(d.getUTCDate()).padStart(2, '0')}${String(d.getUTCHours()).padStart(2, '0')}${String(d.getUTCMinutes()).padStart(2, '0')}${String(d.getUTCSeconds()).padStart(2, '0')}`;
    const id = `cgt-${stamp}-${(++this.seq).toString(36).padStart(5, '0')}`;
    this.tasks.set(id, { id, model: String(body.model), createdAtMs: nowMs, body, prompt, directives: parseDirectives(prompt), cancelled: false, gets: 0 });
    return sendJson(res, 200, { id });
  }
}
