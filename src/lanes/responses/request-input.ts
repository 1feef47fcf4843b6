// The Responses request's \`input\`: a string, or items (messages with text parts, reasoning items
// sent back whole, function calls and their outputs). Every text the vendor reads verbatim is
// counted; built-in tool items, item references and media are refused with the reason.
import { checkField } from '../../util/request-fields.js';
import { RESPONSES_FIELDS as F } from './request-fields.js';
import {
  addVerbatim,
  type Count,
  fail,
  HOLD_ENCRYPTED_CHARS_PER_TOKEN,
  HOLD_ITEM_OVERHEAD_TOKENS,
  INCLUDE_ENCRYPTED_REASONING,
  type Obj,
} from './request-count.js';
import { isObject } from './raw-json.js';

const WHY_ITEMS = 'text only; built-in tool call items and item references are not offered';

const ROLES: ReadonlySet<string> = new Set(['user', 'assistant', 'system', 'developer']);
/** Media content parts, in messages and in function outputs. */
const MEDIA_PARTS: ReadonlySet<string> = new Set(['input_image', 'input_file', 'input_audio', 'image_url', 'image', 'file', 'audio', 'input_video', 'video']);
/** Input items that belong to built-in or custom tools, or that need vendor-side state. */
const UNSUPPORTED_ITEMS: ReadonlySet<string> = new Set([
  'item_reference',
  'file_search_call',
  'web_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'mcp_list_tools',
  'mcp_approval_request',
  'mcp_approval_response',
  'mcp_call',
  'custom_tool_call',
  'custom_tool_call_output',
  'compaction',
]);

export function checkInput(input: unknown, count: Count): void {
  checkField('input', F.input, input === null ? undefined : input);
  if (typeof input === 'string') {
    addVerbatim(count, input);
    count.extra += HOLD_ITEM_OVERHEAD_TOKENS;
    return;
  }
  // A non-empty array: the table (F.input) checked the type.
  const items = input as unknown[];
  for (let i = 0; i < items.length; i++) {
    checkItem(items[i], `input.${i}`, count);
    count.extra += HOLD_ITEM_OVERHEAD_TOKENS;
  }
}

function badInput(param: string, message: string): never {
  fail('invalid_input', param, message);
}

function requireString(item: Obj, key: string, path: string): string {
  const v = item[key];
  if (typeof v !== 'string') badInput(`${path}.${key}`, `\`${path}.${key}\` must be a string.`);
  return v;
}

function checkItem(item: unknown, path: string, count: Count): void {
  if (!isObject(item)) badInput(path, `\`${path}\` must be an object (an input item).`);
  const type = item.type;
  if (type === undefined || type === 'message') {
    checkMessage(item, path, count);
    return;
  }
  if (typeof type !== 'string') badInput(`${path}.type`, `\`${path}.type\` must be a string.`);
  switch (type) {
    case 'reasoning': {
      // With store false the vendor cannot look a reasoning item up by id: it must come back whole.
      const enc = item.encrypted_content;
      if (typeof enc !== 'string' || enc.length === 0) {
        badInput(
          `${path}.encrypted_content`,
          `\`${path}\` is a reasoning item without \`encrypted_content\`; the service keeps no state, so reasoning items must be sent back as returned (the service always requests ${INCLUDE_ENCRYPTED_REASONING}), or left out.`,
        );
      }
      count.extra += Math.ceil(enc.length / HOLD_ENCRYPTED_CHARS_PER_TOKEN);
      const summary = item.summary;
      if (summary !== undefined) {
        if (!Array.isArray(summary)) badInput(`${path}.summary`, `\`${path}.summary\` must be an array.`);
        for (let k = 0; k < summary.length; k++) {
          const s: unknown = summary[k];
          if (!isObject(s) || typeof s.text !== 'string')
            badInput(`${path}.summary.${k}`, `\`${path}.summary.${k}\` must be a summary_text part with a string \`text\`.`);
          count.holdTexts.push(s.text);
        }
      }
      return;
    }
    case 'function_call': {
      requireString(item, 'call_id', path);
      const name = requireString(item, 'name', path);
      const args = requireString(item, 'arguments', path);
      // A call of a function inside a namespace names the namespace too (echoed back as returned).
      if (typeof item.namespace === 'string') addVerbatim(count, item.namespace);
      addVerbatim(count, name);
      addVerbatim(count, args);
      return;
    }
    case 'function_call_output': {
      requireString(item, 'call_id', path);
      const output = item.output;
      if (typeof output === 'string') {
        addVerbatim(count, output);
        return;
      }
      if (!Array.isArray(output)) badInput(`${path}.output`, `\`${path}.output\` must be a string or an array of input_text parts.`);
      for (let k = 0; k < output.length; k++) countTextPart(output[k], `${path}.output.${k}`, count, false);
      return;
    }
    default:
      if (UNSUPPORTED_ITEMS.has(type)) {
        fail('unsupported_parameter', `${path}.type`, `Input items of type "${type}" are not supported in v1: ${WHY_ITEMS}.`);
      }
      if (MEDIA_PARTS.has(type)) fail('unsupported_parameter', `${path}.type`, `"${type}" input is not supported in v1: text only.`);
      badInput(`${path}.type`, `Unknown input item type ${JSON.stringify(type.slice(0, 100))}.`);
  }
}

function checkMessage(item: Obj, path: string, count: Count): void {
  const role = item.role;
  if (typeof role !== 'string' || !ROLES.has(role)) badInput(`${path}.role`, `\`${path}.role\` must be one of user, assistant, system, developer.`);
  const content = item.content;
  if (typeof content === 'string') {
    addVerbatim(count, content);
    return;
  }
  if (!Array.isArray(content)) badInput(`${path}.content`, `\`${path}.content\` must be a string or an array of content parts.`);
  for (let k = 0; k < content.length; k++) countTextPart(content[k], `${path}.content.${k}`, count, true);
}

/** A text content part: input_text everywhere; output_text and refusal in messages only. */
function countTextPart(part: unknown, path: string, count: Count, inMessage: boolean): void {
  if (!isObject(part)) badInput(path, `\`${path}\` must be a content part object.`);
  const type = part.type;
  if (typeof type !== 'string') badInput(`${path}.type`, `\`${path}.type\` must be a string.`);
  if (type === 'input_text' || (inMessage && type === 'output_text')) {
    addVerbatim(count, requireString(part, 'text', path));
    return;
  }
  if (inMessage && type === 'refusal') {
    addVerbatim(count, requireString(part, 'refusal', path));
    return;
  }
  if (MEDIA_PARTS.has(type)) fail('unsupported_parameter', `${path}.type`, `"${type}" content is not supported in v1: text only.`);
  badInput(`${path}.type`, `Unknown content part type ${JSON.stringify(type.slice(0, 100))}.`);
}
