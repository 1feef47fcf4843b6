// The funded demo account is for a first try on the embedded store or `npm run demo`, never for a
// database an operator named with DATABASE_URL.
import t from 'tap';
import { demoAccountAllowed } from '../../src/admin/demo.js';
import { loadConfig } from '../../src/config/config.js';

t.test('the demo account is created only by npm run demo or on the embedded PostgreSQL', async (t) => {
  const on = loadConfig({});
  t.equal(demoAccountAllowed(on, { demo: false, dbKind: 'external' }), false, 'npm start on DATABASE_URL: never');
  t.equal(demoAccountAllowed(on, { demo: true, dbKind: 'external' }), true, 'npm run demo on DATABASE_URL: asked for');
  t.equal(demoAccountAllowed(on, { demo: false, dbKind: 'embedded' }), true, 'npm start on the embedded store');
  t.equal(demoAccountAllowed(on, { demo: false, dbKind: 'embedded-shared' }), true, 'a second process on the embedded store');
  const off = loadConfig({}, { demo: { createAccount: false } });
  for (const dbKind of ['external', 'embedded', 'embedded-shared'] as const) {
    t.equal(demoAccountAllowed(off, { demo: true, dbKind }), false, `demo.createAccount false wins (${dbKind})`);
  }
});
