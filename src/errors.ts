// The one table of error codes: code -> HTTP status, type, default message.
// The error table in docs/api/errors.md is checked against this table by test/unit/errors-readme.test.ts,
// so adding a code here means documenting it there.

export interface ErrorSpec {
  readonly status: number;
  readonly type: string;
  readonly message: string;
}

const table = {
  // 400: validation (shared)
  invalid_json: { status: 400, type: 'invalid_request_error', message: 'The request body is not valid JSON.' },
  invalid_body: { status: 400, type: 'invalid_request_error', message: 'The request body must be a JSON object.' },
  invalid_type: { status: 400, type: 'invalid_request_error', message: 'A field has the wrong type.' },
  invalid_enum: { status: 400, type: 'invalid_request_error', message: 'A field is not one of its allowed values.' },
  invalid_value: { status: 400, type: 'invalid_request_error', message: 'A field has a value outside its allowed range.' },
  too_long: { status: 400, type: 'invalid_request_error', message: 'A field is longer than allowed.' },
  too_large: { status: 400, type: 'invalid_request_error', message: 'A number is larger than allowed.' },
  unsupported_parameter: { status: 400, type: 'invalid_request_error', message: 'This parameter is not supported in v1.' },
  upstream_rejected: { status: 400, type: 'invalid_request_error', message: 'The vendor refused the request before running the model.' },
  missing_host: { status: 400, type: 'invalid_request_error', message: 'An HTTP/1.1 request must carry a Host header.' },
  invalid_target: { status: 400, type: 'invalid_request_error', message: 'The request target must be a path beginning with /.' },
  invalid_header: { status: 400, type: 'invalid_request_error', message: 'A request header is not valid HTTP/1.1.' },
  unknown_model: { status: 400, type: 'invalid_request_error', message: 'Unknown model.' },
  // 400: Messages lane
  missing_messages: { status: 400, type: 'invalid_request_error', message: '`messages` must be a non-empty array.' },
  invalid_message: { status: 400, type: 'invalid_request_error', message: 'A message is not valid.' },
  invalid_tool: { status: 400, type: 'invalid_request_error', message: 'A tool is not valid.' },
  missing_max_tokens: { status: 400, type: 'invalid_request_error', message: '`max_tokens` is required and must be a positive integer.' },
  // 400: Responses lane
  missing_input: { status: 400, type: 'invalid_request_error', message: '`input` is required.' },
  invalid_input: { status: 400, type: 'invalid_request_error', message: 'An input item is not valid.' },
  // 400: video and image submit
  unsupported_resolution: { status: 400, type: 'invalid_request_error', message: 'The model does not offer that resolution with these settings.' },
  invalid_duration: { status: 400, type: 'invalid_request_error', message: '`duration` must be a whole number of seconds inside the model range.' },
  invalid_url: { status: 400, type: 'invalid_request_error', message: 'The URL must be a publicly fetchable https URL without credentials.' },
  too_many: { status: 400, type: 'invalid_request_error', message: 'The list is longer than its cap.' },
  invalid_seed: { status: 400, type: 'invalid_request_error', message: '`seed` must be an integer from -1 to 2147483647.' },
  conflicting_references: { status: 400, type: 'invalid_request_error', message: 'Frames and reference lists cannot be combined.' },
  missing_first_frame: { status: 400, type: 'invalid_request_error', message: '`last_frame_url` requires `first_frame_url`.' },
  reference_limit: { status: 400, type: 'invalid_request_error', message: 'The references break the total cap or the audio-anchor rule.' },
  missing_prompt: {
    status: 400,
    type: 'invalid_request_error',
    message: 'A prompt is required unless a frame or an image or video reference carries the intent.',
  },
  invalid_idempotency_key: { status: 400, type: 'invalid_request_error', message: '`Idempotency-Key` must be 1 to 128 characters of [A-Za-z0-9._:-].' },
  // 401-403
  invalid_api_key: { status: 401, type: 'authentication_error', message: 'Invalid API key.' },
  insufficient_ink: { status: 402, type: 'insufficient_ink_error', message: 'The wallet cannot cover the reservation.' },
  key_ink_limit_reached: { status: 402, type: 'insufficient_ink_error', message: "This key's Ink cap would be crossed." },
  tier_gated: { status: 403, type: 'permission_error', message: 'Your plan does not include this product.' },
  invalid_signature: { status: 403, type: 'permission_error', message: 'The media link signature is missing or wrong.' },
  link_expired: { status: 403, type: 'permission_error', message: 'The media link has expired; read the generation again for a fresh one.' },
  // 404-431
  not_found: { status: 404, type: 'not_found_error', message: 'Unknown route.' },
  model_not_found: { status: 404, type: 'not_found_error', message: 'Unknown model.' },
  generation_not_found: { status: 404, type: 'not_found_error', message: 'Unknown generation.' },
  result_unavailable: { status: 404, type: 'not_found_error', message: 'The generation failed; there is no result.' },
  external_api_disabled: { status: 404, type: 'not_found_error', message: 'The API is not open on this deployment.' },
  method_not_allowed: { status: 405, type: 'invalid_request_error', message: 'This method is not served here.' },
  generation_not_ready: { status: 409, type: 'invalid_request_error', message: 'The generation has not finished.' },
  idempotency_key_in_use: { status: 409, type: 'invalid_request_error', message: 'A request with this Idempotency-Key is still being processed.' },
  result_expired: { status: 410, type: 'not_found_error', message: 'The result is past its retention and was deleted.' },
  request_timeout: { status: 408, type: 'invalid_request_error', message: 'The request head or body arrived too slowly.' },
  length_required: { status: 411, type: 'invalid_request_error', message: 'Send the request body with a Content-Length, not chunked.' },
  payload_too_large: { status: 413, type: 'invalid_request_error', message: 'The request is larger than allowed.' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error', message: 'The body must be application/json.' },
  range_not_satisfiable: { status: 416, type: 'invalid_request_error', message: 'The requested byte range is outside the file.' },
  expectation_failed: { status: 417, type: 'invalid_request_error', message: 'The only Expect the gateway meets is 100-continue.' },
  too_many_headers: { status: 431, type: 'invalid_request_error', message: 'The request carries more header fields than allowed.' },
  // 429
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error', message: 'More than the allowed requests per minute on this key.' },
  concurrency_limit: { status: 429, type: 'rate_limit_error', message: 'Too many generations running on this account.' },
  daily_cap_reached: { status: 429, type: 'rate_limit_error', message: "The plan's daily generation cap is reached." },
  // 5xx
  http_version_not_supported: { status: 505, type: 'invalid_request_error', message: 'The gateway speaks HTTP/1.1 and HTTP/1.0 only.' },
  internal_error: { status: 500, type: 'server_error', message: 'The service failed; quote the request id.' },
  provider_error: { status: 502, type: 'provider_error', message: 'The vendor failed or gave no usable usage receipt.' },
  provider_unavailable: { status: 503, type: 'provider_error', message: 'The provider is unavailable; retry after Retry-After.' },
  rate_limiter_unavailable: { status: 503, type: 'server_error', message: 'The rate limiter is unreachable; retry after Retry-After.' },
  // Streaming failure frames (sent as `event: error`, never as an HTTP status of their own)
  usage_unknown: { status: 502, type: 'provider_error', message: 'The stream ended without a usage receipt; the hold is kept until reconciled.' },
  incomplete_stream: { status: 502, type: 'provider_error', message: 'The stream ended without a terminal event.' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof table;
export const ERRORS: Readonly<Record<ErrorCode, ErrorSpec>> = Object.freeze(
  Object.fromEntries(Object.entries(table).map(([k, v]) => [k, Object.freeze({ ...v })])) as Record<ErrorCode, ErrorSpec>,
);

/** Default Retry-After (seconds) for codes whose status demands one (429, 503). */
export const DEFAULT_RETRY_AFTER_S: Readonly<Partial<Record<ErrorCode, number>>> = Object.freeze({
  rate_limiter_unavailable: 5,
  concurrency_limit: 15,
  provider_unavailable: 30,
  rate_limit_exceeded: 1,
  daily_cap_reached: 3600,
});

export interface ApiErrorOptions {
  message?: string;
  param?: string;
  retryAfterS?: number;
  cause?: unknown;
}

// What a client controls and a log line or an error body repeats (field names, paths, model ids,
// header values) is cut to a few hundred characters, marked as cut: one request must not be able
// to write a megabyte of log, nor have a megabyte echoed back in `param`.
/** The most characters of client-controlled text a log field or an error's `param` carries. */
export const CLIP_CHARS = 200;
/** Appended to text that was cut. */
export const CUT_MARK = '…(cut)';

/** `text` when at most `maxChars` long, else its first `maxChars` UTF-16 units (not splitting a pair) and CUT_MARK. */
export function clipped(text: string, maxChars: number = CLIP_CHARS): string {
  if (text.length <= maxChars) return text;
  let end = maxChars;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--; // a high surrogate whose pair would be cut off
  return text.slice(0, end) + CUT_MARK;
}

/** An error message's most characters (the longest of ours is a few hundred). */
const MAX_MESSAGE_CHARS = 1_000;

/** An error with a stable code from the table; the server turns it into the error envelope. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: string;
  readonly param: string | undefined;
  readonly retryAfterS: number | undefined;

  constructor(code: ErrorCode, opts: ApiErrorOptions = {}) {
    const spec = ERRORS[code];
    // `param` and the message may quote what a client sent (a field name, a path): cut, so an answer
    // or a log line never repeats a megabyte of it.
    super(clipped(opts.message ?? spec.message, MAX_MESSAGE_CHARS), opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ApiError';
    this.code = code;
    this.status = spec.status;
    this.type = spec.type;
    this.param = opts.param === undefined ? undefined : clipped(opts.param);
    this.retryAfterS = opts.retryAfterS ?? DEFAULT_RETRY_AFTER_S[code];
  }

  /** The error object's body (docs/api/errors.md). */
  toBody(requestId: string): { error: Record<string, unknown> } {
    const error: Record<string, unknown> = { type: this.type, code: this.code, message: this.message };
    if (this.param !== undefined) error.param = this.param;
    error.request_id = requestId;
    return { error };
  }
}

export const isApiError = (e: unknown): e is ApiError => e instanceof ApiError;
