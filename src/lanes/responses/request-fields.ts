// POST /v1/responses: the top-level fields a body may carry and their rules, once (the rule type and
// its checker are src/util/request-fields.ts, shared with the other bodies). The validator
// (request.ts) checks the allow-list, types, enums and bounds with this table, and the console's
// reference and /v1/openapi.json describe the body from it. Null for an optional field means
// "absent" (the protocol's convention): the validator reads it so before the table's checks.
import { fieldTable } from '../../util/request-fields.js';

/** The vendor refuses `max_output_tokens` below this. */
export const RESPONSES_MIN_OUTPUT_TOKENS = 16;
/** Why `prompt_cache_retention` "24h" is refused. */
const WHY_CACHE_RETENTION = 'only "in_memory" (the default): "24h" has the vendor keep prompt-derived data for a day';

const object = { types: ['object'], expect: 'an object' } as const;
const string = { types: ['string'], expect: 'a string' } as const;
const boolean = { types: ['boolean'], expect: 'a boolean' } as const;

export const RESPONSES_FIELDS = fieldTable({
  // Resolved against the catalogue by the lane, with its own messages; every answer is unknown_model.
  model: { types: ['string'], expect: 'a model id string', required: true, code: 'unknown_model', description: 'Model id or alias' },
  input: {
    types: ['string', 'array'],
    expect: 'a string or an array of items',
    required: true,
    nonEmpty: true,
    missing: { code: 'missing_input', message: '`input` is required: a string or a non-empty array of items.' },
  },
  instructions: string,
  max_output_tokens: {
    types: ['integer'],
    expect: 'an integer',
    minimum: RESPONSES_MIN_OUTPUT_TOKENS,
    modelMaximum: true,
    description: "Default: the model's (32,768)",
  },
  stream: boolean,
  stream_options: object,
  tools: { types: ['array'], expect: 'an array' },
  tool_choice: { types: ['string', 'object'], expect: 'a string or an object' },
  parallel_tool_calls: boolean,
  max_tool_calls: { types: ['integer'], expect: 'an integer', minimum: 1 },
  reasoning: object,
  text: object,
  temperature: { types: ['number'], expect: 'a number', minimum: 0, maximum: 2 },
  top_p: { types: ['number'], expect: 'a number', minimum: 0, maximum: 1 },
  truncation: { types: ['string'], expect: 'a string', enum: ['auto', 'disabled'] },
  include: { types: ['array'], expect: 'an array of strings', items: { type: 'string' } },
  prompt_cache_key: string,
  prompt_cache_retention: { types: ['string'], expect: 'a string', enum: ['in_memory'], refused: { '24h': WHY_CACHE_RETENTION } },
  store: { ...boolean, description: 'Accepted; always sent to the vendor as false' },
  metadata: { types: ['object'], expect: 'an object of strings', description: 'At most 16 string values; not forwarded' },
  client_metadata: { types: ['object'], expect: 'an object of strings', description: 'At most 16 string values, 8 KiB; forwarded' },
  user: string,
  safety_identifier: string,
});
