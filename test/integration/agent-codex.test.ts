// Codex CLI (the real CLI from the npm registry, pinned in test/helpers/agent-clis.ts) completes
// sessions through inkgate's Responses lane, configured exactly as docs/clients.md says: a one-line
// prompt, and a prompt that makes the simulator call Codex's first function tool (exec_command, with
// the made-up command "sim", which the shell in the temporary workspace does not find: harmless),
// whose output Codex sends back before the simulator ends the turn with text. Afterwards nothing was
// refused, every hold is settled, and the key's charge is the sum of its request records.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { agentBinary, INSTALL_TIMEOUT_MS } from '../helpers/agent-clis.js';
import { AGENT_RUN_TIMEOUT_MS, assertCleanSession, assertRunOk, baseAgentEnv, runAgent, sentBodies, startAgentStack } from '../helpers/agent-stack.js';
import { DOC_KEY_VAR, docSnippetFor } from '../helpers/clients-doc.js';

// A first run installs the CLI into the cache (and may wait for another file's install of it)
// before its runs, each bounded by AGENT_RUN_TIMEOUT_MS; a cached one takes seconds.
t.setTimeout(2 * INSTALL_TIMEOUT_MS + 4 * AGENT_RUN_TIMEOUT_MS);

t.test('Codex CLI completes sessions through inkgate', async (t) => {
  const codex = agentBinary('codex');
  const s = await startAgentStack(t);
  const codexHome = join(s.home, '.codex');
  mkdirSync(codexHome);
  writeFileSync(join(codexHome, 'config.toml'), `${docSnippetFor('codex.config.toml', s.origin)}\n\n${docSnippetFor('codex.quiet.toml', s.origin)}\n`);
  const env = baseAgentEnv(s, { [DOC_KEY_VAR]: s.key.key, CODEX_HOME: codexHome });
  const run = (prompt: string) => runAgent(codex, ['exec', '--skip-git-repo-check', prompt], { cwd: s.workspace, env });

  const hello = await run('Say hello');
  if (assertRunOk(t, 'one-line prompt', hello)) t.match(hello.stdout, /simulated reply/, 'the simulated reply is printed');

  const tool = await run('List the files here, use the tool');
  if (assertRunOk(t, 'tool prompt', tool)) t.match(tool.stdout, /Tool result:/, 'the final reply reads the tool output');
  const bodies = sentBodies(s, '/v1/responses');
  const outputs = bodies.flatMap((b) => (Array.isArray(b.input) ? b.input.filter((i: any) => i.type === 'function_call_output') : []));
  t.ok(outputs.length > 0, 'the function call ran and its output went back as function_call_output');

  t.same([...new Set(bodies.map((b) => b.model))], ['text-6-astra'], 'every call named the product id');
  t.notOk(
    bodies.some((b) => (b.tools ?? []).some((x: any) => x.type === 'web_search')),
    'no web_search tool sent (web_search = "disabled")',
  );
  t.comment(`Codex body fields: ${[...new Set(bodies.flatMap((b) => Object.keys(b)))].sort().join(', ')}`);
  t.comment(`Codex tool types: ${[...new Set(bodies.flatMap((b) => (b.tools ?? []).map((x: any) => x.type)))].sort().join(', ')}`);
  await assertCleanSession(t, s, 'Codex');
});
