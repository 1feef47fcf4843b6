// A test file run as a child process by test/integration/agent-stack-setup.test.ts: it starts the
// agent stack with one set-up step made to fail, and must then end by itself (every server, pool and
// timer closed). argv[2] picks the fault:
//   key:   the key step fails as a store that did not answer would;
//   drop:  as key, and a leaked transaction holds a lock in the test schema, so the teardown's
//          DROP SCHEMA waits for its lock timeout and names the session holding it.
// argv[3] names the leaked session (its application_name). When it has not ended a few seconds
// after its test, it prints what is still open.
import pg from 'pg';
import t from 'tap';
import { startAgentStack } from './agent-stack.js';
import { testDatabaseUrl } from './env.js';

const mode = process.argv[2];
const leakedApp = process.argv[3] ?? 'inkgate-leaked-tx';

t.test(`agent stack set-up fails (${mode})`, async (t) => {
  let leaked: pg.Client | undefined;
  let schema = '';
  // Registered first, so it runs last (tap runs teardowns in reverse): after the drop has failed.
  t.teardown(async () => {
    if (!leaked) return;
    await leaked.end();
    const c = new pg.Client({ connectionString: testDatabaseUrl });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  });
  t.teardown(() => {
    // What is still open once every teardown ran; a lasting handle here keeps the process alive.
    setTimeout(() => process.stderr.write(`still open: ${JSON.stringify(process.getActiveResourcesInfo())}\n`), 5_000).unref();
  });
  await startAgentStack(t, {
    fault: async (step, g) => {
      if (step !== 'key' || !g) return;
      process.stdout.write(`# schema ${g.db.schema}\n`);
      schema = g.db.schema;
      if (mode === 'drop') {
        leaked = new pg.Client({ connectionString: testDatabaseUrl, application_name: leakedApp });
        await leaked.connect();
        await leaked.query(`BEGIN; LOCK TABLE ${g.db.schema}.accounts IN ACCESS SHARE MODE`);
      }
      throw new Error('Query read timeout (injected)');
    },
  });
});
