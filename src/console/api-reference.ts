// The API's endpoints described once: the console's reference pages and the OpenAPI document at
// /v1/openapi.json are both generated from this table, the error table (src/errors.ts) and the
// model catalogue. Every request body is built (fieldsSchema of src/util/request-fields.ts) from the
// field table its validator checks the top level with: src/lanes/*/request-fields.ts for Messages
// and Responses (test/integration/text-request-fields.test.ts holds both sides to it) and
// src/generations/*/request-fields.ts for the video and image submits
// (test/integration/generation-request-fields.test.ts), so the reference cannot drift from what is
// accepted. test/integration/openapi.test.ts keeps this table and the router in agreement (every
// route described, every description routed).
import type { Catalog } from '../catalog/models.js';
import { ERRORS, type ErrorCode } from '../errors.js';
import { IMAGE_REQUEST_FIELDS } from '../generations/images/request-fields.js';
import { VIDEO_REQUEST_FIELDS } from '../generations/video/request-fields.js';
import { COUNT_TOKENS_FIELDS, MESSAGES_FIELDS } from '../lanes/messages/request-fields.js';
import { RESPONSES_FIELDS } from '../lanes/responses/request-fields.js';
import { fieldsSchema, type SchemaContext } from '../util/request-fields.js';

export type JsonSchema = Record<string, unknown>;

export interface Endpoint {
  /** URL slug of the reference page. */
  readonly slug: string;
  readonly method: 'GET' | 'POST';
  /** The router's pattern (":id" parameters). */
  readonly pattern: string;
  readonly title: string;
  readonly summary: string;
  readonly auth: 'key' | 'public';
  /** The JSON body's schema (POST). */
  readonly body?: (catalog: Catalog) => JsonSchema;
  /** The success answer: status, content type, schema. */
  readonly ok: { readonly status: number; readonly type: string; readonly schema: JsonSchema; readonly description: string };
  readonly errors: readonly ErrorCode[];
  readonly doc: string;
  readonly curl: string;
  readonly sdk?: { readonly lang: string; readonly code: string };
}

const str = (description?: string, extra: JsonSchema = {}): JsonSchema => ({ type: 'string', ...(description ? { description } : {}), ...extra });
const int = (description: string, extra: JsonSchema = {}): JsonSchema => ({ type: 'integer', description, ...extra });
const obj = (properties: Record<string, JsonSchema>, required: string[] = [], extra: JsonSchema = {}): JsonSchema => ({
  type: 'object',
  properties,
  ...(required.length ? { required } : {}),
  ...extra,
});
const ids = (catalog: Catalog, type: string, protocol?: string): string[] =>
  catalog.listed
    .filter((m) => m.type === type && (protocol === undefined || (m as { protocol?: string }).protocol === protocol))
    .flatMap((m) => [m.id, ...m.aliases]);

/** A text lane's model enum and largest output cap, from the catalogue the lane resolves models in. */
const textLaneSchemaContext = (catalog: Catalog, protocol: string): SchemaContext => ({
  modelIds: ids(catalog, 'text', protocol),
  maxOutputTokens: Math.max(
    ...catalog.listed
      .filter((m) => m.type === 'text' && (m as { protocol?: string }).protocol === protocol)
      .map((m) => (m as { constraints: { maxOutputTokens: number } }).constraints.maxOutputTokens),
  ),
});

const COMMON: readonly ErrorCode[] = ['invalid_api_key', 'rate_limit_exceeded', 'rate_limiter_unavailable', 'external_api_disabled', 'internal_error'];
const VALIDATION: readonly ErrorCode[] = [
  'invalid_json',
  'invalid_body',
  'invalid_type',
  'invalid_enum',
  'invalid_value',
  'too_long',
  'too_large',
  'unsupported_parameter',
  'unknown_model',
  'payload_too_large',
  'unsupported_media_type',
];
const MONEY: readonly ErrorCode[] = ['insufficient_ink', 'key_ink_limit_reached', 'provider_unavailable'];

const anyObject: JsonSchema = { type: 'object', additionalProperties: true };
const generation = (kind: string): JsonSchema =>
  obj(
    {
      id: str(),
      object: str(undefined, { const: `${kind}.generation` }),
      status: str(undefined, { enum: ['queued', 'running', 'succeeded', 'failed'] }),
      model: str(),
      created_at: int('Unix seconds'),
      ink_reserved: int('Ink held'),
      request: anyObject,
    },
    ['id', 'object', 'status', 'model', 'created_at'],
    { additionalProperties: true },
  );
const contentEp = (kind: 'video' | 'images', label: string): Endpoint => ({
  slug: `${kind}-content`,
  method: 'GET',
  pattern: `/v1/${kind}/generations/:id/content`,
  title: `Download a ${label}`,
  summary: `302 to a fresh signed link to the ${label} (valid 15 minutes).`,
  auth: 'key',
  ok: { status: 302, type: 'text/plain', schema: { type: 'string' }, description: 'Found: Location is the signed media link.' },
  errors: [...COMMON, 'generation_not_found', 'generation_not_ready', 'result_unavailable', 'result_expired'],
  doc: `docs/api/${kind}.md`,
  curl: `curl -L -o result -H "Authorization: Bearer $INKGATE_KEY" $INKGATE_URL/v1/${kind}/generations/GEN_ID/content`,
});
const readEp = (kind: 'video' | 'images', label: string): Endpoint => ({
  slug: `${kind}-get`,
  method: 'GET',
  pattern: `/v1/${kind}/generations/:id`,
  title: `Read a ${label} generation`,
  summary: 'Poll a generation until its status is succeeded or failed.',
  auth: 'key',
  ok: { status: 200, type: 'application/json', schema: generation(kind === 'video' ? 'video' : 'image'), description: 'The generation.' },
  errors: [...COMMON, 'generation_not_found'],
  doc: `docs/api/${kind}.md`,
  curl: `curl -H "Authorization: Bearer $INKGATE_KEY" $INKGATE_URL/v1/${kind}/generations/GEN_ID`,
});

/**
 * A generation submit. `body` is the validator's own field table with the catalogue's model enum;
 * `extraErrors` are the kind's own refusals beside those every submit shares.
 */
const submitEp = (
  kind: 'video' | 'images',
  title: string,
  summary: string,
  body: (catalog: Catalog) => JsonSchema,
  extraErrors: readonly ErrorCode[],
  example: string,
): Endpoint => ({
  slug: `${kind}-submit`,
  method: 'POST',
  pattern: `/v1/${kind}/generations`,
  title,
  summary,
  auth: 'key',
  body,
  ok: { status: 202, type: 'application/json', schema: generation(kind === 'video' ? 'video' : 'image'), description: 'Accepted: the generation.' },
  errors: [
    ...COMMON,
    ...VALIDATION,
    'invalid_url',
    'too_many',
    'invalid_seed',
    'missing_prompt',
    'invalid_idempotency_key',
    'idempotency_key_in_use',
    'concurrency_limit',
    'daily_cap_reached',
    ...extraErrors,
    ...MONEY,
  ],
  doc: `docs/api/${kind}.md`,
  curl: `curl $INKGATE_URL/v1/${kind}/generations -H "Authorization: Bearer $INKGATE_KEY" -H "content-type: application/json" \\\n  -d '${example}'`,
});

export const ENDPOINTS: readonly Endpoint[] = [
  {
    slug: 'messages',
    method: 'POST',
    pattern: '/v1/messages',
    title: 'Messages',
    auth: 'key',
    summary: 'The Anthropic Messages protocol for the assistant-* models, streamed or not; billed in Ink from usage.',
    body: (c) => fieldsSchema(MESSAGES_FIELDS, textLaneSchemaContext(c, 'anthropic-messages')),
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj(
        {
          id: str(),
          type: str(undefined, { const: 'message' }),
          role: str(),
          model: str(),
          content: { type: 'array', items: anyObject },
          stop_reason: { type: ['string', 'null'] },
          usage: anyObject,
        },
        ['id', 'type', 'content', 'usage'],
        { additionalProperties: true },
      ),
      description:
        'A message (or, with stream: true, text/event-stream ending with the service.usage frame: a named event by default, a comment line or nothing as the key or the X-Service-Usage-Frame header says).',
    },
    errors: [
      ...COMMON,
      ...VALIDATION,
      'missing_messages',
      'invalid_message',
      'invalid_tool',
      'missing_max_tokens',
      'upstream_rejected',
      ...MONEY,
      'provider_error',
    ],
    doc: 'docs/api/messages.md',
    curl: `curl $INKGATE_URL/v1/messages -H "Authorization: Bearer $INKGATE_KEY" -H "content-type: application/json" \\\n  -d '{"model":"sonnet","max_tokens":200,"messages":[{"role":"user","content":"Hello"}]}'`,
    sdk: {
      lang: 'TypeScript (@anthropic-ai/sdk)',
      code: `import Anthropic from '@anthropic-ai/sdk';\nconst client = new Anthropic({ baseURL: process.env.INKGATE_URL, authToken: process.env.INKGATE_KEY, apiKey: null });\nconst msg = await client.messages.create({ model: 'sonnet', max_tokens: 200, messages: [{ role: 'user', content: 'Hello' }] });\nconsole.log(msg.content);`,
    },
  },
  {
    slug: 'messages-count-tokens',
    method: 'POST',
    pattern: '/v1/messages/count_tokens',
    title: 'Count Messages tokens',
    auth: 'key',
    summary:
      "The vendor's token count of a Messages prompt (model, messages, system, tools, tool_choice, thinking, output_config). Not billed; limited per key apart from its other requests.",
    body: (c) => fieldsSchema(COUNT_TOKENS_FIELDS, textLaneSchemaContext(c, 'anthropic-messages')),
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj({ input_tokens: int('Tokens of the whole prompt: messages, system and tools') }, ['input_tokens'], { additionalProperties: true }),
      description: 'The count, as the vendor gave it.',
    },
    errors: [...COMMON, ...VALIDATION, 'missing_messages', 'invalid_message', 'invalid_tool', 'upstream_rejected', 'provider_unavailable', 'provider_error'],
    doc: 'docs/api/messages.md',
    curl: `curl $INKGATE_URL/v1/messages/count_tokens -H "Authorization: Bearer $INKGATE_KEY" -H "content-type: application/json" \\\n  -d '{"model":"sonnet","messages":[{"role":"user","content":"Hello"}]}'`,
    sdk: {
      lang: 'TypeScript (@anthropic-ai/sdk)',
      code: `import Anthropic from '@anthropic-ai/sdk';\nconst client = new Anthropic({ baseURL: process.env.INKGATE_URL, authToken: process.env.INKGATE_KEY, apiKey: null });\nconst { input_tokens } = await client.messages.countTokens({ model: 'sonnet', messages: [{ role: 'user', content: 'Hello' }] });\nconsole.log(input_tokens);`,
    },
  },
  {
    slug: 'responses',
    method: 'POST',
    pattern: '/v1/responses',
    title: 'Responses',
    auth: 'key',
    summary: 'The OpenAI Responses protocol for the text-* models, streamed or not; stateless (store is always false).',
    body: (c) => fieldsSchema(RESPONSES_FIELDS, textLaneSchemaContext(c, 'openai-responses')),
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj(
        { id: str(), object: str(undefined, { const: 'response' }), model: str(), output: { type: 'array', items: anyObject }, usage: anyObject },
        ['id', 'object', 'output'],
        { additionalProperties: true },
      ),
      description:
        'A response (or, with stream: true, text/event-stream followed by a `: service.usage` comment, left out when the key or the X-Service-Usage-Frame header says none).',
    },
    errors: [...COMMON, ...VALIDATION, 'missing_input', 'invalid_input', 'invalid_tool', 'upstream_rejected', ...MONEY, 'provider_error'],
    doc: 'docs/api/responses.md',
    curl: `curl $INKGATE_URL/v1/responses -H "Authorization: Bearer $INKGATE_KEY" -H "content-type: application/json" \\\n  -d '{"model":"astra","input":"Hello"}'`,
    sdk: {
      lang: 'TypeScript (openai)',
      code: `import OpenAI from 'openai';\nconst client = new OpenAI({ baseURL: process.env.INKGATE_URL + '/v1', apiKey: process.env.INKGATE_KEY });\nconst r = await client.responses.create({ model: 'astra', input: 'Hello' });\nconsole.log(r.output_text);`,
    },
  },
  {
    slug: 'models',
    method: 'GET',
    pattern: '/v1/models',
    title: 'List models',
    auth: 'public',
    summary: 'The catalogue: every listed model with its prices, limits and availability. No key needed.',
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj({ object: str(undefined, { const: 'list' }), data: { type: 'array', items: anyObject } }, ['object', 'data'], { additionalProperties: true }),
      description: 'The model cards.',
    },
    errors: ['rate_limit_exceeded', 'external_api_disabled', 'internal_error'],
    doc: 'docs/api/models.md',
    curl: 'curl $INKGATE_URL/v1/models',
  },
  {
    slug: 'model',
    method: 'GET',
    pattern: '/v1/models/:id',
    title: 'Read a model',
    auth: 'public',
    summary: "One model's card, by id or alias.",
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj({ id: str(), object: str() }, ['id'], { additionalProperties: true }),
      description: 'The model card.',
    },
    errors: ['model_not_found', 'rate_limit_exceeded', 'external_api_disabled', 'internal_error'],
    doc: 'docs/api/models.md',
    curl: 'curl $INKGATE_URL/v1/models/sonnet',
  },
  {
    slug: 'me',
    method: 'GET',
    pattern: '/v1/me',
    title: 'Account',
    auth: 'key',
    summary: "The calling key's account: balance, period grant remaining, pay-as-you-go, the key's spend and reservations.",
    ok: {
      status: 200,
      type: 'application/json',
      schema: obj({ object: str(undefined, { const: 'account' }), user_id: str(), key: anyObject, ink: anyObject }, ['object', 'user_id', 'key', 'ink']),
      description: 'The account object.',
    },
    errors: [...COMMON],
    doc: 'docs/api/me.md',
    curl: 'curl -H "Authorization: Bearer $INKGATE_KEY" $INKGATE_URL/v1/me',
  },
  submitEp(
    'video',
    'Submit a video generation',
    'Queue a clip; the answer is 202 with the generation to poll. Idempotency-Key makes a retry safe.',
    (c) => fieldsSchema(VIDEO_REQUEST_FIELDS, { modelIds: ids(c, 'video') }),
    ['unsupported_resolution', 'invalid_duration', 'conflicting_references', 'missing_first_frame', 'reference_limit', 'tier_gated'],
    '{"model":"clip-2.5","prompt":"A paper boat on a pond","duration":5}',
  ),
  readEp('video', 'video'),
  contentEp('video', 'clip'),
  submitEp(
    'images',
    'Submit an image generation',
    'Queue an image; the answer is 202 with the generation to poll.',
    (c) => fieldsSchema(IMAGE_REQUEST_FIELDS, { modelIds: ids(c, 'image') }),
    [],
    '{"model":"image-1","prompt":"An ink drop, macro"}',
  ),
  readEp('images', 'image'),
  contentEp('images', 'image'),
  {
    slug: 'openapi',
    method: 'GET',
    pattern: '/v1/openapi.json',
    title: 'OpenAPI document',
    auth: 'public',
    summary: 'This API as an OpenAPI 3.1 document. Public like /v1/models: it describes the API, holds nothing of an account.',
    ok: { status: 200, type: 'application/json', schema: anyObject, description: 'The OpenAPI 3.1 document.' },
    errors: ['rate_limit_exceeded', 'external_api_disabled'],
    doc: 'docs/api/openapi.md',
    curl: 'curl $INKGATE_URL/v1/openapi.json',
  },
];

/** The error rows an endpoint can answer, from the one error table. */
export function endpointErrors(endpoint: Endpoint): Array<{ code: ErrorCode; status: number; type: string; message: string }> {
  return [...new Set(endpoint.errors)].map((code) => ({ code, ...ERRORS[code] })).sort((a, b) => a.status - b.status || a.code.localeCompare(b.code));
}

/** `/v1/models/:id` -> `/v1/models/{id}` (OpenAPI's path template). */
export const openApiPath = (pattern: string): string => pattern.replace(/:([a-z_]+)/g, '{$1}');
