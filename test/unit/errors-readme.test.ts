// The error table of docs/api/errors.md and src/errors.ts must agree, row for row.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ERRORS } from '../../src/errors.js';

const readme = readFileSync(new URL('../../docs/api/errors.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf('## Error codes'));
// | HTTP | type | code | default message | when |: the last column is prose for readers, not checked.
const rows = [...section.matchAll(/^\| (\d{3}) \| `([a-z_]+)` \| `([a-z_]+)` \| ([^|]+?) \| [^|]* \|$/gm)];

t.test('every code in the table is documented with its status, type and message', async (t) => {
  const documented = new Map(rows.map((m) => [m[3]!, { status: Number(m[1]), type: m[2]!, message: m[4]! }]));
  t.same([...documented.keys()].sort(), Object.keys(ERRORS).sort(), 'same set of codes');
  for (const [code, spec] of Object.entries(ERRORS)) {
    t.same(documented.get(code), { status: spec.status, type: spec.type, message: spec.message }, code);
  }
});

t.test('the table is frozen', async (t) => {
  t.ok(Object.isFrozen(ERRORS));
  t.ok(Object.isFrozen(ERRORS.invalid_json));
  t.throws(() => {
    (ERRORS as any).invalid_json.status = 500;
  });
});
