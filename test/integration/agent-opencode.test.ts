// opencode (the real CLI from the npm registry, pinned in test/helpers/agent-clis.ts) completes
// sessions through inkgate's Messages lane with the Vercel AI SDK's Anthropic provider inside it,
// configured exactly as docs/clients.md says (its usage frame as an SSE comment): a one-line
// prompt, and a prompt that makes the simulator ask for opencode's read tool (run on a file in a
// temporary workspace, its content sent back as the tool result). Afterwards nothing was refused,
// every hold is settled, and the key's charge is the sum of its request records.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { agentBinary, INSTALL_TIMEOUT_MS } from '../helpers/agent-clis.js';
import { AGENT_RUN_TIMEOUT_MS, assertCleanSession, assertRunOk, baseAgentEnv, runAgent, sentBodies, startAgentStack } from '../helpers/agent-stack.js';
import { DOC_KEY_VAR, docEnv, docSnippetFor } from '../helpers/clients-doc.js';

// A first run installs the CLI into the cache (and may wait for another file's install of it)
// before its runs, each bounded by AGENT_RUN_TIMEOUT_MS; a cached one takes seconds.
t.setTimeout(2 * INSTALL_TIMEOUT_MS + 4 * AGENT_RUN_TIMEOUT_MS);

const FILE_TEXT = 'inkgate agent test file';

t.test('opencode completes sessions through inkgate', async (t) => {
  const opencode = agentBinary('opencode');
  const s = await startAgentStack(t);
  const configDir = join(s.home, '.config', 'opencode');
  mkdirSync(configDir, { recursive: true });
  writeFileSync(join(configDir, 'opencode.json'), docSnippetFor('opencode.json', s.origin));
  const env = baseAgentEnv(s, { ...docEnv('opencode.env', s.origin, s.key.key), [DOC_KEY_VAR]: s.key.key });
  const run = (prompt: string) => runAgent(opencode, ['run', prompt], { cwd: s.workspace, env });

  const hello = await run('Say hello');
  if (assertRunOk(t, 'one-line prompt', hello)) t.match(hello.stdout, /Echo:/, 'the simulated reply is printed');

  // The simulator fills a tool's required properties with "<name> value": read gets filePath
  // "filePath value", which opencode resolves in its working directory.
  writeFileSync(join(s.workspace, 'filePath value'), `${FILE_TEXT}\n`);
  const tool = await run('Read the notes [[sim:tool=read]]');
  if (assertRunOk(t, 'tool prompt', tool)) t.match(tool.stdout, /The tool returned:/, 'the reply reads the tool result');
  const bodies = sentBodies(s, '/v1/messages');
  const results = bodies.flatMap((b) =>
    (b.messages ?? []).flatMap((m: any) => (Array.isArray(m.content) ? m.content.filter((c: any) => c.type === 'tool_result') : [])),
  );
  t.ok(
    results.some((r: any) => JSON.stringify(r.content).includes(FILE_TEXT)),
    'the read tool ran and its output went back as a tool_result',
  );

  const frames = s.tap.requests.map((r) => r.rawHeaders.find(([k]) => k.toLowerCase() === 'x-service-usage-frame')?.[1]);
  t.same([...new Set(frames)], ['comment'], 'every call asked for the usage frame as a comment');
  t.same([...new Set(bodies.map((b) => b.model))], ['assistant-sonnet-5'], 'every call named the product id');
  await assertCleanSession(t, s, 'opencode');
});
