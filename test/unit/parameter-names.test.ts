// A parameter's name is the first documentation a reader of a function gets: no parameter in src/
// is named with one or two letters, except in a short lambda (an arrow or function expression that
// fits on one line, where the use sits beside the name), a leading underscore that marks a
// parameter as unused, and `id`, which is a word rather than an abbreviation. The rule is tested on a sample first, so a broken walk cannot pass the tree
// by finding nothing.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { SRC, tsSources } from '../helpers/source-tree.js';

const MAX_SHORT_NAME = 2;
/** Short names that are whole words, not abbreviations. */
const WORDS: ReadonlySet<string> = new Set(['id']);

/** A lambda whose whole text sits on one line: its parameters may be short. */
function isShortLambda(node: ts.Node, file: ts.SourceFile): boolean {
  if (!ts.isArrowFunction(node) && !ts.isFunctionExpression(node)) return false;
  const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
  const last = file.getLineAndCharacterOfPosition(node.getEnd()).line;
  return first === last;
}

/** Every parameter in `text` named too shortly, as `line:name`. */
export function shortParameters(fileName: string, text: string): string[] {
  const file = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isParameter(node) && ts.isIdentifier(node.name)) {
      const name = node.name.text;
      const owner = node.parent;
      const excused = name.startsWith('_') || WORDS.has(name) || isShortLambda(owner, file);
      if (name.length <= MAX_SHORT_NAME && !excused) {
        out.push(`${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}:${name}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return out;
}

t.test('the rule finds short names and excuses one-line lambdas and unused markers', async (t) => {
  const sample = [
    'function read(id: string, n: number) {',
    '  return [id, n];',
    '}',
    'const pick = (xs: number[]) => xs.map((x) => x + 1);',
    'const long = (ab: number) => {',
    '  return ab;',
    '};',
    'class K {',
    '  method(_: unknown, count: number) {',
    '    return count;',
    '  }',
    '}',
    'const expr = function (q: string) {',
    '  return q;',
    '};',
  ].join('\n');
  t.same(shortParameters('sample.ts', sample), ['1:n', '5:ab', '13:q']);
});

t.test('no parameter in src/ has a one- or two-letter name outside a one-line lambda', async (t) => {
  const files = tsSources(SRC);
  t.ok(files.length > 100, `src/ read (${files.length} files)`);
  const short: string[] = [];
  for (const file of files) {
    for (const at of shortParameters(file, readFileSync(file, 'utf8'))) short.push(`${relative(SRC, file)}:${at}`);
  }
  t.same(short, [], 'parameters to name for what they hold');
});
