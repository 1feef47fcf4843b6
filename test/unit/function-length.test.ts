// No function in src/ is longer than a reader can hold in mind: a body of at most MAX_BODY_LINES
// lines (declarations, methods, arrows and function expressions alike, counted from the opening
// brace to the closing one). A function past it is named with its place so it can be split into
// helpers that each do one job. The measure itself is tested on a small sample first, so a broken
// walk cannot pass the tree by finding nothing. Also measured here: no file in src/ over
// MAX_FILE_LINES, and the performance page kept to a dashboard.
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { SRC, tsSources } from '../helpers/source-tree.js';

const MAX_BODY_LINES = 70;

interface Length {
  readonly name: string;
  readonly line: number;
  readonly lines: number;
}

function nameOf(node: ts.FunctionLikeDeclaration): string {
  if (node.name !== undefined) return node.name.getText();
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) return parent.name.getText();
  return '<anonymous>';
}

/** Every function with a block body in `text`, with the length of that body in lines. */
export function functionLengths(fileName: string, text: string): Length[] {
  const file = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const out: Length[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body !== undefined && ts.isBlock(node.body)) {
      const first = file.getLineAndCharacterOfPosition(node.body.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.body.getEnd()).line;
      out.push({ name: nameOf(node as ts.FunctionLikeDeclaration), line: first + 1, lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return out;
}

t.test('the measure counts every kind of function body', async (t) => {
  const body = (n: number): string => Array.from({ length: n }, (_, i) => `  const v${i} = ${i};`).join('\n');
  const sample = [
    `function declared() {\n${body(3)}\n}`,
    `const arrow = () => {\n${body(5)}\n};`,
    `class K {\n  method() {\n${body(7)}\n  }\n}`,
    `const expr = function () {\n${body(2)}\n};`,
    `const short = (x: number) => x + 1;`,
  ].join('\n');
  const got = functionLengths('sample.ts', sample).map((f) => [f.name, f.lines]);
  t.same(
    got,
    [
      ['declared', 5],
      ['arrow', 7],
      ['method', 9],
      ['expr', 4],
    ],
    'names and body lines, braces included; an expression body is not a block',
  );
});

t.test(`no function in src/ has a body over ${MAX_BODY_LINES} lines`, async (t) => {
  const files = tsSources(SRC);
  t.ok(files.length > 100, `src/ read (${files.length} files)`);
  let measured = 0;
  const long: string[] = [];
  for (const file of files) {
    for (const f of functionLengths(file, readFileSync(file, 'utf8'))) {
      measured++;
      if (f.lines > MAX_BODY_LINES) long.push(`${relative(SRC, file)}:${f.line} ${f.name} (${f.lines} lines)`);
    }
  }
  t.ok(measured > 1000, `functions measured (${measured})`);
  t.same(long, [], 'functions to split into helpers');
});

/** A file that grows past this has grown a second job: split it (house style). */
const MAX_FILE_LINES = 450;

t.test(`no TypeScript file in src/ is over ${MAX_FILE_LINES} lines`, async (t) => {
  const long = tsSources(SRC)
    .map((file) => ({ file: relative(SRC, file), lines: readFileSync(file, 'utf8').split('\n').length - 1 }))
    .filter((f) => f.lines > MAX_FILE_LINES)
    .map((f) => `${f.file} (${f.lines} lines)`);
  t.same(long, [], 'files to split by job');
});

/** The performance page is a dashboard: the latest figure of each bench; the rest is its history. */
const MAX_DASHBOARD_BYTES = 12_000;

t.test(`docs/performance.md stays a dashboard (at most ${MAX_DASHBOARD_BYTES} bytes)`, async (t) => {
  const bytes = readFileSync(join(SRC, '..', 'docs', 'performance.md')).length;
  t.ok(bytes <= MAX_DASHBOARD_BYTES, `${bytes} bytes; move older figures to docs/performance-history.md`);
});
