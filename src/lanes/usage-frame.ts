// The closing usage frame of a streamed text reply, in the form the request asked for: the key's
// setting (api_keys.usage_frame), or the request's X-Service-Usage-Frame header, which overrides
// it for that request. The form is picked once per request, before the hold; the frame is written
// once, after the last vendor event, so nothing here runs per chunk. Failure frames (`event:
// error` with usage_unknown or incomplete_stream) are not usage frames: every setting gets them.
import { USAGE_FRAME_CHOICES, USAGE_FRAMES, type UsageFrame } from '../accounts/usage-frame.js';
import { inkToUsd } from '../catalog/pricing.js';
import { ApiError } from '../errors.js';
import type { HttpContext } from '../server/http-context.js';

/** The per-request override, named as clients send it (lower case: how the engines store names). */
export const USAGE_FRAME_HEADER = 'X-Service-Usage-Frame';
const HEADER_KEY = USAGE_FRAME_HEADER.toLowerCase();

/** Header value -> form; matched without regard to case, as HTTP tokens usually are. */
const BY_VALUE: ReadonlyMap<string, UsageFrame> = new Map(USAGE_FRAMES.map((f) => [f, f]));

/**
 * The form this request's usage frame takes: the header's when it carries one, else the key's.
 * An unknown value is the client's mistake, refused (400) before anything is held.
 */
export function requestedUsageFrame(ctx: HttpContext, keyFrame: UsageFrame): UsageFrame {
  const v = ctx.header(HEADER_KEY);
  if (v === undefined) return keyFrame;
  const form = BY_VALUE.get(v.trim().toLowerCase());
  if (form !== undefined) return form;
  throw new ApiError('invalid_enum', {
    param: USAGE_FRAME_HEADER,
    message: `${USAGE_FRAME_HEADER} must be ${USAGE_FRAME_CHOICES}; got ${JSON.stringify(v.slice(0, 64))}.`,
  });
}

/** What goes before and after the frame's JSON payload, per form (none: no frame). */
const WRAP: Readonly<Record<UsageFrame, readonly [string, string] | undefined>> = Object.freeze({
  event: ['event: service.usage\ndata: ', '\n\n'],
  comment: [': service.usage ', '\n\n'],
  none: undefined,
});

/** The frame's bytes for a settled charge, in `form`; '' for none. */
export function usageFrameText(form: UsageFrame, inkCharged: number, requestId: string): string {
  const wrap = WRAP[form];
  if (wrap === undefined) return '';
  return wrap[0] + JSON.stringify({ type: 'service.usage', ink_charged: inkCharged, usd_payg_charged: inkToUsd(inkCharged), request_id: requestId }) + wrap[1];
}
