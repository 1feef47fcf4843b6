// POST /v1/messages: the top-level fields a body may carry and their rules, once (the rule type and
// its checker are src/util/request-fields.ts, shared with the other bodies). The validator
// (request.ts) checks the allow-list, types and bounds with this table, and the console's reference
// and /v1/openapi.json describe the body from it. `null` is no JSON type here: the protocol has no
// nulls at the top level, so a null field answers `invalid_type` (or the field's own code).
import { fieldTable, type FieldTable } from '../../util/request-fields.js';

const object = { types: ['object'], expect: 'an object' } as const;
const number = { types: ['number'], expect: 'a number' } as const;

export const MESSAGES_FIELDS = fieldTable({
  // Resolved against the catalogue by the lane, with its own messages; every answer is unknown_model.
  model: { types: ['string'], expect: 'a model id string', required: true, code: 'unknown_model', description: 'Model id or alias' },
  messages: {
    types: ['array'],
    expect: 'a non-empty array of user and assistant turns',
    required: true,
    nonEmpty: true,
    code: 'missing_messages',
    message: '`messages` must be a non-empty array of user and assistant turns.',
    nested: {
      array: {
        items: {
          type: 'object',
          properties: {
            role: { type: 'string', enum: ['user', 'assistant'] },
            content: {
              oneOf: [
                { type: 'string', minLength: 1 },
                { type: 'array', minItems: 1, items: { type: 'object', additionalProperties: true } },
              ],
            },
          },
          required: ['role', 'content'],
        },
      },
    },
  },
  max_tokens: {
    types: ['integer'],
    expect: 'a positive integer',
    required: true,
    minimum: 1,
    modelMaximum: true,
    code: 'missing_max_tokens',
    message: '`max_tokens` is required and must be a positive integer.',
    description: 'Output cap, 1 to the model maximum',
  },
  system: { types: ['string', 'array'], expect: 'a string or an array of text blocks' },
  tools: { types: ['array'], expect: 'an array' },
  tool_choice: object,
  thinking: object,
  output_config: object,
  temperature: number,
  top_p: number,
  top_k: number,
  stop_sequences: { types: ['array'], expect: 'an array of strings', items: { type: 'string' } },
  stream: { types: ['boolean'], expect: 'a boolean' },
  metadata: object,
});

/**
 * The vendor's count endpoint's top-level fields (it refuses any other, `max_tokens` included, as
 * "Extra inputs are not permitted"): the prompt of a Messages request and nothing about its reply.
 */
const VENDOR_COUNT_TOKENS_FIELDS: readonly string[] = [
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
];

/**
 * POST /v1/messages/count_tokens: the Messages rows the vendor's count endpoint also takes, the
 * same row objects (so the same rules), in the Messages table's order. A field Messages does not
 * allow is not allowed here either; one only a reply uses (max_tokens, stream, metadata, sampling)
 * is not sent to a count.
 */
export const COUNT_TOKENS_FIELDS: FieldTable = Object.freeze(
  Object.fromEntries(Object.entries(MESSAGES_FIELDS).filter(([key]) => VENDOR_COUNT_TOKENS_FIELDS.includes(key))),
);
