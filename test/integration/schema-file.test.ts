// src/store/schema.sql is generated from the migrations and read instead of them. This test keeps
// it honest: it migrates a fresh schema, dumps it, and fails with the differing lines and the
// command that regenerates the file whenever the two part ways. The database is the suite's
// (test/helpers/env.ts): the machine's Postgres or the embedded one, whose major versions differ,
// and the dump is the same text on both.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import t from 'tap';
import { PROJECT_ROOT } from '../../src/config/config.js';
import { dumpSchema, REGENERATE_COMMAND, SCHEMA_FILE, schemaFileBody } from '../../src/store/schema-dump.js';
import { testDb } from '../helpers/db.js';

const CONTEXT = 3;
const MAX_LINES = 200;

type Op = { op: ' ' | '-' | '+'; line: string };

/** The edit script from `a` to `b`: a longest common subsequence of the lines between their shared ends. */
function editScript(a: string[], b: string[]): Op[] {
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const x = a.slice(pre, a.length - suf);
  const y = b.slice(pre, b.length - suf);
  const w = y.length + 1;
  const lcs = new Uint32Array((x.length + 1) * w); // lcs[i*w+j]: common lines of x[i..] and y[j..]
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      lcs[i * w + j] = x[i] === y[j] ? lcs[(i + 1) * w + j + 1]! + 1 : Math.max(lcs[(i + 1) * w + j]!, lcs[i * w + j + 1]!);
    }
  }
  const ops: Op[] = a.slice(0, pre).map((line) => ({ op: ' ', line }));
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) {
      ops.push({ op: ' ', line: x[i]! });
      i++;
      j++;
    } else if (i < x.length && (j === y.length || lcs[(i + 1) * w + j]! >= lcs[i * w + j + 1]!)) {
      ops.push({ op: '-', line: x[i++]! }); // a change reads as its old lines, then its new ones
    } else {
      ops.push({ op: '+', line: y[j++]! });
    }
  }
  return ops.concat(a.slice(a.length - suf).map((line) => ({ op: ' ', line })));
}

/**
 * A unified diff from `a` (the file) to `b` (what the migrations build), 3 lines of context, at
 * most MAX_LINES lines. Line numbers start at `firstLine`, the file's number of a's first line.
 */
function lineDiff(a: string, b: string, firstLine = 1): string {
  const ops = editScript(a.split('\n'), b.split('\n'));
  const keep = ops.map(() => false);
  ops.forEach((o, k) => {
    if (o.op !== ' ') for (let c = Math.max(0, k - CONTEXT); c <= Math.min(ops.length - 1, k + CONTEXT); c++) keep[c] = true;
  });
  const out: string[] = [];
  let aLine = firstLine;
  let bLine = firstLine;
  for (let k = 0; k < ops.length; ) {
    if (!keep[k]) {
      if (ops[k]!.op !== '+') aLine++;
      if (ops[k]!.op !== '-') bLine++;
      k++;
      continue;
    }
    let end = k;
    while (end < ops.length && keep[end]) end++;
    const hunk = ops.slice(k, end);
    const aCount = hunk.filter((o) => o.op !== '+').length;
    const bCount = hunk.filter((o) => o.op !== '-').length;
    out.push(`@@ -${aLine},${aCount} +${bLine},${bCount} @@`, ...hunk.map((o) => `${o.op}${o.line}`));
    aLine += aCount;
    bLine += bCount;
    k = end;
  }
  if (out.length > MAX_LINES) return [...out.slice(0, MAX_LINES), `... ${out.length - MAX_LINES} more lines`].join('\n');
  return out.join('\n');
}

t.test('the line diff shows what differs, and nothing when nothing does', async (t) => {
  t.equal(lineDiff('a\nb\nc', 'a\nb\nc'), '');
  t.equal(lineDiff('a\nb\nc', 'a\nc'), '@@ -1,3 +1,2 @@\n a\n-b\n c');
  t.equal(lineDiff('a\nb', 'a\nB\nb', 10), '@@ -10,2 +10,3 @@\n a\n+B\n b');
  const far = ['x', ...'0123456789'.split(''), 'y'];
  t.equal(
    lineDiff(far.join('\n'), ['X', ...far.slice(1, -1), 'Y'].join('\n')),
    '@@ -1,4 +1,4 @@\n-x\n+X\n 0\n 1\n 2\n@@ -9,4 +9,4 @@\n 7\n 8\n 9\n-y\n+Y',
    'two hunks, each with its line numbers',
  );
});

t.test('src/store/schema.sql is what the migrations build', async (t) => {
  const db = await testDb(t);
  const dump = await dumpSchema(db.pool, db.schema);
  t.equal(await dumpSchema(db.pool, db.schema), dump, 'two dumps of one schema are the same text');
  // Landmarks, so an empty or truncated dump cannot pass by matching an equally broken file.
  t.match(dump, /^CREATE TABLE requests \($/m, 'the dump has the requests table');
  t.match(dump, /^CREATE OR REPLACE FUNCTION ledger_flush\(/m, 'the dump has ledger_flush');
  t.match(dump, /^CREATE TRIGGER ledger_journal_append_only /m, 'the dump has the journal trigger');
  t.notOk(dump.includes(db.schema), 'the name of the schema the migrations ran in appears nowhere');

  const file = readFileSync(SCHEMA_FILE, 'utf8');
  const body = schemaFileBody(file);
  const where = relative(PROJECT_ROOT, SCHEMA_FILE);
  t.match(file.slice(0, file.length - body.length), /GENERATED from the migrations[\s\S]*do not edit/, `${where} says it is generated`);
  t.ok(file.includes(REGENERATE_COMMAND), `${where} names the command that regenerates it`);
  if (body === dump) {
    t.pass(`${where} equals the schema the migrations build`);
  } else {
    const headerLines = file.slice(0, file.length - body.length).split('\n').length;
    // The diff goes in the `diff` field, which tap's reporters print as a diff, line by line.
    t.fail(`${where} is not what the migrations build; regenerate it with: ${REGENERATE_COMMAND}`, {
      diff: `--- ${where}\n+++ built by the migrations\n${lineDiff(body, dump, headerLines)}\n`,
    });
  }
});

t.test('a schema holding what the dump cannot print is refused, not printed in part', async (t) => {
  const db = await testDb(t);
  await db.pool.query(`CREATE TYPE ${db.schema}.dump_probe_kind AS ENUM ('a', 'b'); COMMENT ON TABLE ${db.schema}.requests IS 'probe'`);
  await t.rejects(dumpSchema(db.pool, db.schema), /does not print yet.*type dump_probe_kind.*comment on table/, 'names what it cannot print');
  await t.rejects(dumpSchema(db.pool, `${db.schema}_absent`), /no schema named/, 'a missing schema is an error, not an empty dump');
});
