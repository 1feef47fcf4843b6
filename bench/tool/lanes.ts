// What a text request looks like on each lane, for the gateway and for the vendor called directly:
// endpoint, headers, bodies, and the marker of the first content delta (time to first token).
import type { LaneName } from './args.js';

/** Origin and path of a lane's endpoint under a base URL ("/v1" at the end of the base is optional). */
export function laneEndpoint(lane: LaneName, baseUrl: string): { origin: string; path: string } {
  const u = new URL(baseUrl);
  const prefix = u.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
  return { origin: u.origin, path: `${prefix}/v1/${lane}` };
}

export function vendorHeaders(lane: LaneName, key: string, anthropicVersion: string): Record<string, string> {
  return lane === 'messages' ? { 'x-api-key': key, 'anthropic-version': anthropicVersion } : { authorization: `Bearer ${key}` };
}

/** The bytes that begin the first visible content delta of a stream. */
export const FIRST_DELTA_MARKER: Readonly<Record<LaneName, Buffer>> = {
  messages: Buffer.from('content_block_delta'),
  responses: Buffer.from('response.output_text.delta'),
};

export interface LaneBodies {
  readonly plain: string;
  readonly stream: string;
  readonly paced: string;
}

const PROMPT = 'Benchmark prompt of modest size.';

/**
 * Request bodies for a model id. Paced bodies carry the simulators' pacing directives (a real
 * vendor reads them as prompt text and answers at its own pace).
 */
export function laneBodies(lane: LaneName, model: string, paceMs: number, deltas: number): LaneBodies {
  const paced = `${PROMPT} [[sim:pace=${paceMs}]] [[sim:tokens=${deltas}]]`;
  if (lane === 'messages') {
    const b = (stream: boolean, text: string, maxTokens: number) =>
      JSON.stringify({ model, max_tokens: maxTokens, ...(stream ? { stream: true } : {}), messages: [{ role: 'user', content: text }] });
    return { plain: b(false, PROMPT, 256), stream: b(true, PROMPT, 256), paced: b(true, paced, Math.max(256, deltas * 2)) };
  }
  const b = (stream: boolean, text: string, maxTokens: number) =>
    JSON.stringify({ model, max_output_tokens: maxTokens, ...(stream ? { stream: true } : {}), input: text });
  return { plain: b(false, PROMPT, 256), stream: b(true, PROMPT, 256), paced: b(true, paced, Math.max(256, deltas * 2)) };
}
