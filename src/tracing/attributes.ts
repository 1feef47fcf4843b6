// The span attribute names we write: the stable HTTP ones from the semantic conventions package,
// the GenAI ones (still incubating there, so spelled here) and our own. Nothing here can hold a
// key, a prompt or an output: every value is a number, an id we issue, a model id, a route label,
// an error code or a key's public prefix.
export {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_PATH,
} from '@opentelemetry/semantic-conventions';

export const GEN_AI_OPERATION_NAME = 'gen_ai.operation.name';
export const GEN_AI_SYSTEM = 'gen_ai.system';
/** The newer name of gen_ai.system; both are written while backends move over. */
export const GEN_AI_PROVIDER_NAME = 'gen_ai.provider.name';
export const GEN_AI_REQUEST_MODEL = 'gen_ai.request.model';
export const GEN_AI_RESPONSE_MODEL = 'gen_ai.response.model';
export const GEN_AI_REQUEST_MAX_TOKENS = 'gen_ai.request.max_tokens';
export const GEN_AI_USAGE_INPUT_TOKENS = 'gen_ai.usage.input_tokens';
export const GEN_AI_USAGE_OUTPUT_TOKENS = 'gen_ai.usage.output_tokens';
export const GEN_AI_RESPONSE_FINISH_REASONS = 'gen_ai.response.finish_reasons';

export const INK_HELD = 'inkgate.ink.held';
export const INK_CHARGED = 'inkgate.ink.charged';
export const REQUEST_ID = 'inkgate.request_id';
export const KEY_PREFIX = 'inkgate.key_prefix';
export const GENERATION_ID = 'inkgate.generation.id';
export const GENERATION_KIND = 'inkgate.generation.kind';
export const GENERATION_STATE = 'inkgate.generation.state';
export const JOURNAL_RECORDS = 'inkgate.journal.records';
export const JOURNAL_TRACED = 'inkgate.journal.traced_requests';

/** The event on the vendor span when a stream's first event is relayed to the client. */
export const FIRST_TOKEN_EVENT = 'gen_ai.first_token';

/** A token count from a lane's usage record (Messages: camelCase; Responses: the wire's snake_case). */
export function tokenCount(usage: object | undefined, camel: 'inputTokens' | 'outputTokens', snake: 'input_tokens' | 'output_tokens'): number | undefined {
  if (usage === undefined) return undefined;
  const u = usage as Record<string, unknown>;
  const v = u[camel] ?? u[snake];
  return typeof v === 'number' && Number.isSafeInteger(v) ? v : undefined;
}

/**
 * What `error.type` says of an error: its code when it has one of ours (an ApiError), else its
 * class name. Never its message, which may quote a vendor's answer.
 */
export function errorType(error: unknown): string {
  if (error !== null && typeof error === 'object') {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(code)) return code;
    const name = (error as { name?: unknown }).name;
    if (typeof name === 'string' && name.length <= 64) return name;
  }
  return 'error';
}
