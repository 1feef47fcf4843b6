// Claude Code (the real CLI from the npm registry, pinned in test/helpers/agent-clis.ts) completes
// sessions through inkgate, set up exactly as docs/clients.md says: a one-line prompt, a prompt that
// makes the simulator ask for Claude Code's Read tool (run on a file in a temporary workspace, its
// content sent back as the tool result), and `/context`, which counts tokens. Afterwards nothing
// was refused but the one system turn Claude Code is known to drop and resend, every hold is
// settled, and the key's charge is the sum of its request records.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { agentBinary, INSTALL_TIMEOUT_MS } from '../helpers/agent-clis.js';
import {
  AGENT_RUN_TIMEOUT_MS,
  assertCleanSession,
  assertRunOk,
  baseAgentEnv,
  runAgent,
  sentBodies,
  startAgentStack,
  type AgentStack,
} from '../helpers/agent-stack.js';
import { docEnv } from '../helpers/clients-doc.js';
import type { TappedRequest } from '../helpers/header-tap.js';

// A first run installs the CLI into the cache (and may wait for another file's install of it)
// before its runs, each bounded by AGENT_RUN_TIMEOUT_MS; a cached one takes seconds.
t.setTimeout(2 * INSTALL_TIMEOUT_MS + 4 * AGENT_RUN_TIMEOUT_MS);

const MODEL = 'assistant-sonnet-5';
const FILE_TEXT = 'inkgate agent test file';

/** The refusal Claude Code recovers from: its system turn inside `messages`, once per session. */
const systemTurn = (runs: number) => ({
  why: 'the system turn Claude Code drops and resends once per session',
  matches: (r: TappedRequest) => r.status === 400 && r.errorBody.includes('Unexpected role \\"system\\"'),
  max: runs,
});

function claudeEnv(s: AgentStack): Record<string, string> {
  return baseAgentEnv(s, {
    ...docEnv('claude-code.env', s.origin, s.key.key),
    // Belt and braces beside the page's CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC.
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_AUTOUPDATER: '1',
  });
}

t.test('Claude Code completes sessions through inkgate', async (t) => {
  const claude = agentBinary('claude-code');
  const s = await startAgentStack(t);
  const env = claudeEnv(s);
  const run = (prompt: string) => runAgent(claude, ['-p', prompt, '--model', MODEL], { cwd: s.workspace, env });

  const hello = await run('Say hello');
  if (assertRunOk(t, 'one-line prompt', hello)) t.match(hello.stdout, /Echo:/, 'the simulated reply is printed');

  // The simulator fills a tool's required properties with "<name> value": Read gets file_path
  // "file_path value", which Claude Code resolves in its working directory.
  writeFileSync(join(s.workspace, 'file_path value'), `${FILE_TEXT}\n`);
  const tool = await run('Read the notes [[sim:tool=Read]]');
  if (assertRunOk(t, 'tool prompt', tool)) t.match(tool.stdout, /The tool returned:/, 'the reply reads the tool result');
  const results = sentBodies(s, '/v1/messages').flatMap((b) =>
    (b.messages ?? []).flatMap((m: any) => (Array.isArray(m.content) ? m.content.filter((c: any) => c.type === 'tool_result') : [])),
  );
  t.ok(
    results.some((r: any) => JSON.stringify(r.content).includes(FILE_TEXT)),
    'the Read tool ran and its output went back as a tool_result',
  );

  const context = await run('/context');
  assertRunOk(t, '/context', context);
  const counts = s.tap.requests.filter((r) => r.path.split('?')[0] === '/v1/messages/count_tokens');
  t.ok(counts.length > 0, `/context counted tokens through the gateway (${counts.length} calls)`);

  const models = new Set(sentBodies(s, '/v1/messages').map((b) => b.model));
  t.same([...models], [MODEL], 'every call named the product id');
  t.notOk(
    sentBodies(s, '/v1/messages').some((b) => 'context_management' in b),
    'no context_management sent (CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS)',
  );
  await assertCleanSession(t, s, 'Claude Code', systemTurn(3));
});
