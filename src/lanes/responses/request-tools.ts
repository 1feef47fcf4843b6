// The Responses request's tools: function tools and namespaces of them (counted for the hold),
// tool_choice, and the refusal of every server tool by name, so a coding agent's user learns
// which of its tools to turn off.
import { checkField } from '../../util/request-fields.js';
import { RESPONSES_FIELDS as F } from './request-fields.js';
import { addVerbatim, type Count, fail, HOLD_TOOL_OVERHEAD_TOKENS, type Obj, optional } from './request-count.js';
import { isObject } from './raw-json.js';

/** Why parts of accepted fields are refused (messages of the `unsupported_parameter` answers). */
const WHY_TOOLS = 'send function tools, or namespaces of function tools';
/**
 * Tools the vendor runs itself. Named in the refusal: a coding agent's user must learn which of
 * its tools to turn off (the service runs and bills no server tools).
 */
const SERVER_TOOLS: ReadonlySet<string> = new Set([
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'web_search_2025_08_26',
  'file_search',
  'code_interpreter',
  'image_generation',
  'mcp',
  'computer',
  'computer_use',
  'computer_use_preview',
  'local_shell',
  'shell',
  'apply_patch',
  'tool_search',
]);
/** At most this many tool definitions per request, the tools inside namespaces counted. */
export const MAX_TOOL_DEFINITIONS = 512;
const TOOL_CHOICE_MODES: ReadonlySet<string> = new Set(['auto', 'none', 'required']);
/** tool_choice object types that name a rejected tool kind. */
const TOOL_CHOICE_UNSUPPORTED: ReadonlySet<string> = new Set([
  'allowed_tools',
  'file_search',
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'computer_use_preview',
  'code_interpreter',
  'image_generation',
  'mcp',
  'custom',
  'local_shell',
  'shell',
  'apply_patch',
]);
/** tools, tool_choice, parallel_tool_calls, max_tool_calls. */
export function checkToolFields(body: Obj, count: Count): void {
  const tools = optional(body, 'tools');
  checkField('tools', F.tools, tools);
  if (tools !== undefined) checkTools(tools as unknown[], count);
  const toolChoice = optional(body, 'tool_choice');
  checkField('tool_choice', F.tool_choice, toolChoice);
  if (toolChoice !== undefined) checkToolChoice(toolChoice);
  checkField('parallel_tool_calls', F.parallel_tool_calls, optional(body, 'parallel_tool_calls'));
  checkField('max_tool_calls', F.max_tool_calls, optional(body, 'max_tool_calls'));
}

function checkTools(tools: unknown[], count: Count): void {
  const seen = { definitions: 0 };
  for (let i = 0; i < tools.length; i++) checkTool(tools[i], `tools.${i}`, count, seen, false);
}

/** One tool definition: a function tool, or (at the top level only) a namespace of them. */
function checkTool(tool: unknown, path: string, count: Count, seen: { definitions: number }, inNamespace: boolean): void {
  if (++seen.definitions > MAX_TOOL_DEFINITIONS)
    fail('too_long', 'tools', `\`tools\` may hold at most ${MAX_TOOL_DEFINITIONS} tool definitions, those inside namespaces counted.`);
  if (!isObject(tool)) fail('invalid_tool', path, `\`${path}\` must be a tool object.`);
  const type = tool.type;
  if (type === 'namespace' && !inNamespace) {
    checkNamespace(tool, path, count, seen);
    return;
  }
  if (type !== 'function') refuseToolType(type, path, inNamespace);
  const name = tool.name;
  if (typeof name !== 'string' || name.length === 0) fail('invalid_tool', `${path}.name`, `\`${path}.name\` must be a non-empty string.`);
  addVerbatim(count, name);
  addDescription(tool, path, count);
  const parameters = tool.parameters;
  if (parameters !== undefined && parameters !== null) {
    if (!isObject(parameters)) fail('invalid_type', `${path}.parameters`, `\`${path}.parameters\` must be a JSON Schema object.`);
    count.holdTexts.push(JSON.stringify(parameters));
  }
  const strict = tool.strict;
  if (strict !== undefined && strict !== null && typeof strict !== 'boolean') fail('invalid_type', `${path}.strict`, `\`${path}.strict\` must be a boolean.`);
  count.extra += HOLD_TOOL_OVERHEAD_TOKENS;
}

/** `{type: "namespace", name, description?, tools}`: client function tools grouped under a name. */
function checkNamespace(tool: Obj, path: string, count: Count, seen: { definitions: number }): void {
  const name = tool.name;
  if (typeof name !== 'string' || name.length === 0) fail('invalid_tool', `${path}.name`, `\`${path}.name\` must be a non-empty string.`);
  addVerbatim(count, name);
  addDescription(tool, path, count);
  const inner = tool.tools;
  if (!Array.isArray(inner) || inner.length === 0) fail('invalid_tool', `${path}.tools`, `\`${path}.tools\` must be a non-empty array of function tools.`);
  for (let k = 0; k < inner.length; k++) checkTool(inner[k], `${path}.tools.${k}`, count, seen, true);
  count.extra += HOLD_TOOL_OVERHEAD_TOKENS;
}

function addDescription(tool: Obj, path: string, count: Count): void {
  const description = tool.description;
  if (description === undefined || description === null) return;
  if (typeof description !== 'string') fail('invalid_type', `${path}.description`, `\`${path}.description\` must be a string.`);
  addVerbatim(count, description);
}

/** A tool type other than function (or namespace at the top level): why it is refused. */
function refuseToolType(type: unknown, path: string, inNamespace: boolean): never {
  if (typeof type !== 'string') fail('invalid_tool', `${path}.type`, `\`${path}.type\` must be "function"${inNamespace ? '' : ' or "namespace"'}.`);
  const shown = JSON.stringify(type.slice(0, 100));
  if (type === 'namespace') fail('invalid_tool', `${path}.type`, `\`${path}\` is a namespace inside a namespace; namespaces do not nest.`);
  if (SERVER_TOOLS.has(type)) {
    fail(
      'unsupported_parameter',
      `${path}.type`,
      `The ${shown} tool is a server tool, run by the vendor; this service runs and bills no server tools. Remove ${shown} from \`tools\` (turn it off in your client) and ${WHY_TOOLS}.`,
    );
  }
  fail('unsupported_parameter', `${path}.type`, `Tools of type ${shown} are not supported in v1: ${WHY_TOOLS}.`);
}

function checkToolChoice(toolChoice: unknown): void {
  if (typeof toolChoice === 'string') {
    if (!TOOL_CHOICE_MODES.has(toolChoice))
      fail('invalid_enum', 'tool_choice', '`tool_choice` must be "auto", "none", "required" or {type: "function", name}.');
    return;
  }
  if (!isObject(toolChoice)) fail('invalid_type', 'tool_choice', '`tool_choice` must be a string or an object.');
  const type = toolChoice.type;
  if (type === 'function') {
    if (typeof toolChoice.name !== 'string' || toolChoice.name.length === 0)
      fail('invalid_type', 'tool_choice.name', '`tool_choice.name` must be a non-empty string.');
    return;
  }
  if (typeof type === 'string' && TOOL_CHOICE_UNSUPPORTED.has(type)) {
    fail('unsupported_parameter', 'tool_choice.type', `\`tool_choice\` of type "${type}" is not supported in v1: only function tools.`);
  }
  fail('invalid_enum', 'tool_choice.type', '`tool_choice.type` must be "function".');
}
