// Gemini image simulator: a real node:http server on 127.0.0.1, port 0, answering
//   POST /v1beta/models/{model}:generateContent
// in the shapes of the real API: a thought part, then the image as an
// inline base64 PNG of the requested size class and aspect ratio (a real, decodable PNG), and
// usageMetadata with thinking tokens. Auth: `x-goog-api-key`, else 403 PERMISSION_DENIED.
//
// Directives in the prompt text (the first text part) choose failures:
//   [[sim:safety]]          finishReason IMAGE_SAFETY, no parts (gemini_response_image_safety.json)
//   [[sim:blocked]]         no candidates, promptFeedback.blockReason PROHIBITED_CONTENT
//   [[sim:text-only]]       finishReason STOP with a text part and no image
//   [[sim:refuse]]          400 INVALID_ARGUMENT
//   [[sim:unavailable]]     503 UNAVAILABLE;  [[sim:unavailable=N]]  the first N calls with this prompt
//   [[sim:ratelimit]]       429 RESOURCE_EXHAUSTED, Retry-After: 7
//   [[sim:garbage]]         200 with a body that is not JSON
// The request itself is checked as the vendor would: imageSize in 1K/2K/4K (upper-case K),
// aspectRatio from the documented list, at most 14 inline images, responseModalities with IMAGE.
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { readJsonObject } from '../read-json-body.js';
import { solidPng } from './png.js';

export const DEFAULT_GEMINI_SIM_API_KEY = 'gemini-sim-key-0000';
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const MAX_INLINE_IMAGES = 14;
const MAX_PNG_CACHE = 64;

/** Output pixels per aspect ratio and size class (Gemini 3 Pro Image documentation). */
export const GEMINI_PIXEL_SIZES: Readonly<Record<string, Readonly<Record<'1K' | '2K' | '4K', readonly [number, number]>>>> = {
  '1:1': { '1K': [1024, 1024], '2K': [2048, 2048], '4K': [4096, 4096] },
  '2:3': { '1K': [848, 1264], '2K': [1696, 2528], '4K': [3392, 5056] },
  '3:2': { '1K': [1264, 848], '2K': [2528, 1696], '4K': [5056, 3392] },
  '3:4': { '1K': [896, 1200], '2K': [1792, 2400], '4K': [3584, 4800] },
  '4:3': { '1K': [1200, 896], '2K': [2400, 1792], '4K': [4800, 3584] },
  '4:5': { '1K': [928, 1152], '2K': [1856, 2304], '4K': [3712, 4608] },
  '5:4': { '1K': [1152, 928], '2K': [2304, 1856], '4K': [4608, 3712] },
  '9:16': { '1K': [768, 1376], '2K': [1536, 2752], '4K': [3072, 5504] },
  '16:9': { '1K': [1376, 768], '2K': [2752, 1536], '4K': [5504, 3072] },
  '21:9': { '1K': [1584, 672], '2K': [3168, 1344], '4K': [6336, 2688] },
};

/** Image tokens per size class (1K matches the captures: 1120). */
const IMAGE_TOKENS: Readonly<Record<string, number>> = { '1K': 1120, '2K': 1120, '4K': 2000 };

export interface GeminiSimulatorOptions {
  readonly apiKey?: string;
}

export interface GeminiSimCall {
  readonly model: string;
  readonly body: Record<string, unknown>;
  readonly prompt: string;
  /** Inline images received (mime types, sizes). */
  readonly inline: ReadonlyArray<{ mimeType: string; sizeBytes: number }>;
}

export interface GeminiSimulator {
  /** Base URL of the API (`…/v1beta`): what INKGATE_GEMINI_BASE_URL points at. */
  readonly url: string;
  readonly apiKey: string;
  readonly port: number;
  /** Every generateContent body received (parsed), in order. */
  readonly calls: GeminiSimCall[];
  /** Runs before each call is answered (tests: hold a call in flight). */
  beforeGenerate: ((call: GeminiSimCall) => Promise<void>) | undefined;
  close(): Promise<void>;
}

const googleError = (code: number, status: string, message: string) => ({ error: { code, message, status } });

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=UTF-8', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

const obj = (v: unknown): Record<string, unknown> | undefined =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;

function responseId(seq: number): string {
  return `sim${seq.toString(36).padStart(6, '0')}${Math.random().toString(36).slice(2, 10)}`;
}

export async function startGeminiSimulator(opts: GeminiSimulatorOptions = {}): Promise<GeminiSimulator> {
  const apiKey = opts.apiKey ?? DEFAULT_GEMINI_SIM_API_KEY;
  const calls: GeminiSimCall[] = [];
  const sim: GeminiSimulator = { url: '', apiKey, port: 0, calls, beforeGenerate: undefined, close: async () => undefined };
  const st: SimState = { sim, pngCache: new Map(), failuresLeft: new Map(), seq: 0 };
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    handle(st, req, res).catch(() => {
      if (!res.headersSent) sendJson(res, 500, googleError(500, 'INTERNAL', 'simulator failure'));
      else res.destroy();
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  Object.assign(sim, {
    url: `http://127.0.0.1:${port}/v1beta`,
    port,
    close: async () => {
      for (const s of sockets) s.destroy();
      const closing = once(server, 'close');
      server.close();
      await closing;
    },
  });
  return sim;
}

interface SimState {
  readonly sim: GeminiSimulator;
  readonly pngCache: Map<string, string>;
  /** Calls answered 503 so far per prompt ([[sim:unavailable=N]]). */
  readonly failuresLeft: Map<string, number>;
  seq: number;
}

/** What a call's answer is built from: its id and its prompt's token counts. */
interface Answer {
  readonly res: ServerResponse;
  readonly call: GeminiSimCall;
  readonly id: string;
  readonly promptTokens: number;
  readonly promptDetails: ReadonlyArray<{ modality: string; tokenCount: number }>;
  readonly thoughts: number;
}

function pngBase64(st: SimState, w: number, h: number): string {
  const k = `${w}x${h}`;
  let v = st.pngCache.get(k);
  if (v === undefined) {
    v = solidPng(w, h).toString('base64');
    if (st.pngCache.size >= MAX_PNG_CACHE) st.pngCache.clear();
    st.pngCache.set(k, v);
  }
  return v;
}

async function handle(st: SimState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  const m = /^\/v1beta\/models\/([A-Za-z0-9._-]{1,100}):generateContent$/.exec(path);
  if (!m) return sendJson(res, 404, googleError(404, 'NOT_FOUND', `no route ${path}`));
  if (req.method !== 'POST') return sendJson(res, 405, googleError(405, 'METHOD_NOT_ALLOWED', 'method not allowed'));
  if (req.headers['x-goog-api-key'] !== st.sim.apiKey) {
    return sendJson(
      res,
      403,
      googleError(
        403,
        'PERMISSION_DENIED',
        "Method doesn't allow unregistered callers. Please use API Key or other form of API consumer identity to call this API.",
      ),
    );
  }
  const body = await readJsonObject(req, MAX_BODY_BYTES);
  if (body === undefined) return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.'));
  const contents = Array.isArray(body.contents) ? body.contents : [];
  const parts = Array.isArray(obj(contents[0])?.parts) ? (obj(contents[0])!.parts as unknown[]) : [];
  const prompt = parts.map((p) => obj(p)?.text).find((t): t is string => typeof t === 'string') ?? '';
  const inline = parts
    .map((p) => obj(obj(p)?.inlineData))
    .filter((d): d is Record<string, unknown> => d !== undefined)
    .map((d) => ({ mimeType: String(d.mimeType), sizeBytes: Buffer.from(String(d.data ?? ''), 'base64').length }));
  const call: GeminiSimCall = { model: m[1]!, body, prompt, inline };
  st.sim.calls.push(call);
  if (st.sim.beforeGenerate) await st.sim.beforeGenerate(call);

  const gen = obj(body.generationConfig) ?? {};
  const imageConfig = obj(gen.imageConfig) ?? {};
  const size = imageConfig.imageSize === undefined ? '1K' : imageConfig.imageSize;
  const aspect = imageConfig.aspectRatio === undefined ? '1:1' : imageConfig.aspectRatio;
  const modalities = Array.isArray(gen.responseModalities) ? gen.responseModalities : [];
  if (contents.length === 0 || parts.length === 0)
    return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', '* GenerateContentRequest.contents: contents is not specified'));
  if (size !== '1K' && size !== '2K' && size !== '4K') return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', `Invalid image size: ${String(size)}`));
  if (typeof aspect !== 'string' || GEMINI_PIXEL_SIZES[aspect] === undefined)
    return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', `Invalid aspect ratio: ${String(aspect)}`));
  if (!modalities.includes('IMAGE')) return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', 'responseModalities must include IMAGE for this model'));
  if (inline.length > MAX_INLINE_IMAGES) return sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', `At most ${MAX_INLINE_IMAGES} images are supported`));

  const textTokens = Math.max(1, Math.ceil(prompt.length / 4));
  const id = responseId(++st.seq);
  const a: Answer = {
    res,
    call,
    id,
    promptTokens: textTokens + inline.length * 258,
    promptDetails: [{ modality: 'TEXT', tokenCount: textTokens }, ...(inline.length > 0 ? [{ modality: 'IMAGE', tokenCount: inline.length * 258 }] : [])],
    thoughts: 150 + (st.seq % 200),
  };
  if (directiveAnswer(st, a)) return;
  imageAnswer(st, a, size, GEMINI_PIXEL_SIZES[aspect]![size]);
}

/** The [[sim:...]] directives of the prompt; true when one answered. */
function directiveAnswer(st: SimState, a: Answer): boolean {
  const { res, call, id, promptTokens, promptDetails, thoughts } = a;
  const prompt = call.prompt;
  const unavail = /\[\[sim:unavailable(?:=(\d{1,4}))?\]\]/.exec(prompt);
  if (unavail) {
    const limit = unavail[1] === undefined ? Infinity : Number(unavail[1]);
    const used = st.failuresLeft.get(prompt) ?? 0;
    if (used < limit) {
      st.failuresLeft.set(prompt, used + 1);
      sendJson(res, 503, googleError(503, 'UNAVAILABLE', 'The model is overloaded. Please try again later.'));
      return true;
    }
  }
  if (prompt.includes('[[sim:ratelimit]]'))
    sendJson(res, 429, googleError(429, 'RESOURCE_EXHAUSTED', 'Resource has been exhausted (e.g. check quota).'), { 'retry-after': '7' });
  else if (prompt.includes('[[sim:refuse]]')) sendJson(res, 400, googleError(400, 'INVALID_ARGUMENT', 'Request contains an invalid argument.'));
  else if (prompt.includes('[[sim:garbage]]')) sendJson(res, 200, '<html>oops</html>');
  else if (prompt.includes('[[sim:blocked]]')) {
    sendJson(res, 200, {
      promptFeedback: { blockReason: 'PROHIBITED_CONTENT' },
      usageMetadata: { promptTokenCount: promptTokens, totalTokenCount: promptTokens, promptTokensDetails: promptDetails },
      modelVersion: call.model,
      responseId: id,
    });
  } else if (prompt.includes('[[sim:safety]]')) {
    sendJson(res, 200, {
      candidates: [
        {
          content: { parts: null },
          finishReason: 'IMAGE_SAFETY',
          finishMessage:
            "Unable to show the generated image. The image was filtered out because it violated Google's Generative AI Prohibited Use policy. You will not be charged for blocked images. Try rephrasing the prompt.",
          index: 0,
        },
      ],
      promptFeedback: { safetyRatings: null },
      usageMetadata: {
        promptTokenCount: promptTokens,
        candidatesTokenCount: 0,
        totalTokenCount: promptTokens + thoughts,
        thoughtsTokenCount: thoughts,
        promptTokensDetails: promptDetails,
      },
      modelVersion: call.model,
      responseId: id,
    });
  } else if (prompt.includes('[[sim:text-only]]')) {
    sendJson(res, 200, {
      candidates: [{ content: { role: 'model', parts: [{ text: 'I can describe it instead.' }] }, finishReason: 'STOP', index: 0 }],
      usageMetadata: {
        promptTokenCount: promptTokens,
        candidatesTokenCount: 8,
        totalTokenCount: promptTokens + 8 + thoughts,
        thoughtsTokenCount: thoughts,
        promptTokensDetails: promptDetails,
      },
      modelVersion: call.model,
      responseId: id,
    });
  } else return false;
  return true;
}

/** A generated image of `w` x `h`, with a thought part before it, as the real model answers. */
function imageAnswer(st: SimState, a: Answer, size: '1K' | '2K' | '4K', [w, h]: readonly [number, number]): void {
  const imageTokens = IMAGE_TOKENS[size]!;
  const candidatesTokens = imageTokens + 100;
  sendJson(a.res, 200, {
    candidates: [
      {
        content: {
          role: 'model',
          parts: [
            { text: "**Imagining the Scene**\n\nI'm currently picturing the scene.", thought: true },
            { thoughtSignature: 'EqCzQgqcs0IBcsjafEVyOV' + a.id, inlineData: { mimeType: 'image/png', data: pngBase64(st, w, h) } },
          ],
        },
        finishReason: 'STOP',
        index: 0,
      },
    ],
    usageMetadata: {
      promptTokenCount: a.promptTokens,
      candidatesTokenCount: candidatesTokens,
      totalTokenCount: a.promptTokens + candidatesTokens + a.thoughts,
      thoughtsTokenCount: a.thoughts,
      promptTokensDetails: a.promptDetails,
      candidatesTokensDetails: [{ modality: 'IMAGE', tokenCount: imageTokens }],
    },
    modelVersion: a.call.model,
    responseId: a.id,
  });
}
