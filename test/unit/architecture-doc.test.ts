// docs/architecture.md names files and, beside them, functions: every file must exist and hold the
// function it is named with, so the page cannot drift from the code without this test failing.
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const page = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8');

/** Repository paths in backticks: src/..., test/..., docs/..., config/..., bench/... */
const PATH_RE = /`((?:src|simulators|test|docs|config|bench)\/[A-Za-z0-9_./-]+)`/g;

t.test('every path the page names exists', async (t) => {
  const paths = new Set([...page.matchAll(PATH_RE)].map((m) => m[1]!));
  t.ok(paths.size >= 40, `the page names ${paths.size} paths`);
  for (const p of paths) t.ok(existsSync(join(root, p)), p);
});

t.test('every function named beside a file is in that file', async (t) => {
  // Table rows `| step | `file` | `function` |`; a row with an empty step continues the one above.
  const rows = [...page.matchAll(/^\|[^|\n]*\| `((?:src|test)\/[^`]+)` \| `([A-Za-z_$][\w$]*)` \|$/gm)];
  t.ok(rows.length >= 30, `${rows.length} file and function pairs`);
  for (const [, file, fn] of rows) {
    const text = readFileSync(join(root, file!), 'utf8');
    t.match(text, new RegExp(`\\b${fn}\\b`), `${fn} in ${file}`);
  }
});

t.test('the documentation index links the page first', async (t) => {
  const index = readFileSync(join(root, 'docs', 'README.md'), 'utf8');
  const first = /\]\(([^)]+\.md)\)/.exec(index);
  t.equal(first?.[1], 'architecture.md');
});
