// The per-key choice of how a streamed text reply carries the service's closing usage frame
// (docs/api/messages.md, "The usage frame"). The key row holds it (api_keys.usage_frame), the CLI
// and the console change it, and a request may override it with X-Service-Usage-Frame.

/** `event`: `event: service.usage` (named SSE event); `comment`: `: service.usage {json}`; `none`: no frame. */
export const USAGE_FRAMES = ['event', 'comment', 'none'] as const;
export type UsageFrame = (typeof USAGE_FRAMES)[number];
export const DEFAULT_USAGE_FRAME: UsageFrame = 'event';

export const isUsageFrame = (v: unknown): v is UsageFrame => (USAGE_FRAMES as readonly unknown[]).includes(v);

/** The allowed values as an operator or a person reads them in an error: `event, comment or none`. */
export const USAGE_FRAME_CHOICES = `${USAGE_FRAMES.slice(0, -1).join(', ')} or ${USAGE_FRAMES.at(-1)}`;
