// `POST /v1/messages/count_tokens` of the Anthropic simulator, planned here and answered by
// simulator.ts (which has already checked the key, the version header and the shared body rules
// with validateMessagesBody(body, true)). Pure: no I/O.
//
// The vendor's count endpoint takes the prompt of a Messages request and nothing about the reply:
// `max_tokens`, `stream`, `metadata`, sampling and the rest answer 400 invalid_request_error
// "<field>: Extra inputs are not permitted", as the real endpoint does. The answer is
// `{"input_tokens":N}`, N the prompt's total input tokens by the simulator's one formula
// (scenarios.ts countInput): what `/v1/messages` reports for the same prompt as
// input_tokens + cache_creation_input_tokens + cache_read_input_tokens. Counting reads no cache
// and writes none.
//
// Directives in the last user message (or the simulator's scenario) that make sense for a count:
// `[[sim:status=N]]` with `[[sim:retry-after=S]]`, and `[[sim:stall-before-headers]]`; the others
// shape a reply a count does not have and are ignored. An unknown or malformed directive answers
// 400, as on /v1/messages.
import { countInput, emptyDirectives, lastUserTurn, parseDirectives } from './scenarios.js';

export const COUNT_TOKENS_PATH = '/v1/messages/count_tokens';

/**
 * The vendor's count parameters (its SDK's MessageCountTokensParams), plus the beta ones a coding
 * agent sends with its `anthropic-beta` header (`context_management`, `mcp_servers`).
 */
const COUNT_FIELDS: ReadonlySet<string> = new Set([
  'model',
  'messages',
  'system',
  'tools',
  'tool_choice',
  'thinking',
  'output_config',
  'cache_control',
  'speed',
  'user_profile_id',
  'workspace_id',
  'context_management',
  'mcp_servers',
]);

export type CountTokensPlan =
  | { readonly kind: 'count'; readonly json: string }
  | { readonly kind: 'invalid'; readonly message: string }
  | { readonly kind: 'status'; readonly status: number; readonly retryAfterS: number | undefined }
  | { readonly kind: 'stall' };

/** The answer to a count whose body passed validateMessagesBody(body, true). */
export function planCountTokens(body: Record<string, unknown>, scenario: string | null): CountTokensPlan {
  for (const key of Object.keys(body)) {
    if (!COUNT_FIELDS.has(key)) return { kind: 'invalid', message: `${key}: Extra inputs are not permitted` };
  }
  const d = emptyDirectives();
  const directiveError = (scenario !== null ? parseDirectives(scenario, d) : undefined) ?? parseDirectives(lastUserTurn(body).text, d);
  if (directiveError !== undefined) return { kind: 'invalid', message: directiveError };
  if (d.stallBeforeHeaders) return { kind: 'stall' };
  if (d.status !== undefined) return { kind: 'status', status: d.status, retryAfterS: d.retryAfterS };
  return { kind: 'count', json: `{"input_tokens":${countInput(body).total}}` };
}
