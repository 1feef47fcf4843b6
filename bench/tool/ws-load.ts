// The WebSocket variant of the latency scenario (Responses lane): N sockets, each sending its next
// `response.create` turn when the previous one's last event arrived, many turns on one socket, so
// the figure sits beside the `stream` run (one HTTP request per turn) of the same scenario.
import { WebSocket } from 'ws';
import { newHistogram, recordMs } from './histogram.js';
import type { Request, Tally, Window } from './load.js';
import { noWindow } from './load.js';

/** Every wait on a target is bounded: a socket that hangs fails the turn, not the bench. */
const TURN_TIMEOUT_MS = 60_000;
const FAILURE_SAMPLES = 5;
const FIRST_DELTA = 'response.output_text.delta';

export interface WsLoopOptions {
  readonly request: Request;
  readonly connections: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly maxRequests: number;
  readonly window?: Window;
}

/** A streaming Responses body as the `response.create` event that carries it (stream implied). */
export function turnEvent(streamBody: string): string {
  const { stream: _stream, ...rest } = JSON.parse(streamBody) as Record<string, unknown>;
  return JSON.stringify({ type: 'response.create', ...rest });
}

/** One socket to the target's Responses path, open. */
function openSocket(r: Request): Promise<WebSocket> {
  const url = r.origin.replace(/^http/, 'ws') + r.path;
  const ws = new WebSocket(url, { headers: { authorization: r.headers.authorization ?? '' }, perMessageDeflate: false, handshakeTimeout: TURN_TIMEOUT_MS });
  return new Promise((resolveO, reject) => {
    ws.once('open', () => resolveO(ws));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
  });
}

interface TurnAnswer {
  readonly failed: string | null;
  readonly ttftMs: number;
  readonly events: number;
}

/** One turn: sends the event and reads to the `service.usage` (or an `error`) event. */
function oneTurn(ws: WebSocket, event: string, t0: number): Promise<TurnAnswer> {
  return new Promise((resolveT, reject) => {
    let ttftMs = Number.NaN;
    let events = 0;
    const timer = setTimeout(() => finish(new Error('turn timed out')), TURN_TIMEOUT_MS);
    const onMessage = (data: Buffer): void => {
      events++;
      const text = data.toString('utf8');
      if (Number.isNaN(ttftMs) && text.includes(FIRST_DELTA)) ttftMs = performance.now() - t0;
      if (text.startsWith('{"type":"service.usage"')) finish(undefined, null);
      else if (text.startsWith('{"type":"error"')) finish(undefined, text.slice(0, 300));
    };
    const onClose = (): void => finish(new Error('socket closed mid-turn'));
    const finish = (err: Error | undefined, failed: string | null = null): void => {
      clearTimeout(timer);
      ws.off('message', onMessage).off('close', onClose);
      if (err) reject(err);
      else resolveT({ failed, ttftMs, events });
    };
    ws.on('message', onMessage).once('close', onClose);
    ws.send(event);
  });
}

/** N sockets, each sending its next turn when the previous one has ended. */
export async function wsLoop(o: WsLoopOptions): Promise<Tally> {
  const t: Tally = { requests: 0, statuses: {}, errors: {}, failureSamples: [], chunks: 0, seconds: 0, latency: newHistogram(), ttft: newHistogram() };
  const event = turnEvent(o.request.body);
  const window = o.window ?? noWindow;
  let recording = false;
  let stop = false;
  let full: () => void = () => undefined;
  const reachedMax = new Promise<void>((r) => (full = r));
  const sockets: WebSocket[] = [];
  const worker = async () => {
    while (!stop) {
      let ws: WebSocket;
      try {
        ws = await openSocket(o.request);
        sockets.push(ws);
      } catch (e) {
        if (recording) t.errors[(e as Error).message] = (t.errors[(e as Error).message] ?? 0) + 1;
        await new Promise((r) => setTimeout(r, 5));
        continue;
      }
      while (!stop && ws.readyState === WebSocket.OPEN) {
        const t0 = performance.now();
        try {
          const a = await oneTurn(ws, event, t0);
          if (!recording) continue;
          t.requests++;
          const status = a.failed === null ? '200' : 'error event';
          t.statuses[status] = (t.statuses[status] ?? 0) + 1;
          if (a.failed !== null && t.failureSamples.length < FAILURE_SAMPLES) t.failureSamples.push(a.failed);
          recordMs(t.latency, performance.now() - t0);
          t.chunks += a.events;
          if (!Number.isNaN(a.ttftMs)) recordMs(t.ttft, a.ttftMs);
          if (t.requests >= o.maxRequests) full();
        } catch (e) {
          if (recording) t.errors[(e as Error).message] = (t.errors[(e as Error).message] ?? 0) + 1;
        }
      }
    }
  };
  const workers = Array.from({ length: o.connections }, worker);
  await new Promise((r) => setTimeout(r, o.warmupMs));
  await window.start();
  recording = true;
  const started = performance.now();
  await Promise.race([new Promise((r) => setTimeout(r, o.durationMs)), reachedMax]);
  recording = false;
  t.seconds = (performance.now() - started) / 1000;
  await window.end();
  stop = true;
  await Promise.race([Promise.all(workers), new Promise((r) => setTimeout(r, TURN_TIMEOUT_MS))]);
  for (const ws of sockets) ws.close(1000);
  return t;
}
