// The source tree has no import cycle, types included: every module of src/ can be read after the
// modules it imports. A cycle is reported with its path (a -> b -> ... -> a) so it can be cut where
// it is cheapest, usually by moving a shared type or constant down into a module both can import.
import { readFileSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import t from 'tap';
import { SRC, tsSources } from '../helpers/source-tree.js';

// Static imports and re-exports (`import type` too) and dynamic import('...') of a relative path.
const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s+['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;

/** The imports of every module under `dirs` (default: `root` itself), as paths relative to `root`. */
export function importGraph(root: string, dirs: readonly string[] = [root]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of dirs.flatMap((d) => tsSources(d))) {
    const text = readFileSync(file, 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(IMPORT)) {
      const spec = m[1] ?? m[2]!;
      deps.add(relative(root, resolve(dirname(file), spec.replace(/\.js$/, '.ts'))));
    }
    graph.set(relative(root, file), [...deps].sort());
  }
  return graph;
}

/** Strongly connected components of more than one module (or a module importing itself): Tarjan. */
export function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(comp.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!idx.has(v)) visit(v);
  return out;
}

/** One concrete loop inside a component, for the message: a -> b -> ... -> a. */
function loopIn(graph: Map<string, string[]>, comp: string[]): string {
  const inComp = new Set(comp);
  const start = comp[0]!;
  const prev = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (!inComp.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let x: string | undefined = v; x !== undefined && x !== start; x = prev.get(x)) path.splice(1, 0, x);
        return [...path, start].join(' -> ');
      }
      if (!prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return comp.join(', ');
}

t.test('the checker finds a cycle it is given, and none where there is none', async (t) => {
  const g = new Map([
    ['a.ts', ['b.ts']],
    ['b.ts', ['c.ts']],
    ['c.ts', ['a.ts']],
    ['d.ts', ['a.ts']],
  ]);
  t.same(cycles(g), [['a.ts', 'b.ts', 'c.ts']]);
  t.equal(loopIn(g, ['a.ts', 'b.ts', 'c.ts']), 'a.ts -> b.ts -> c.ts -> a.ts');
  t.same(
    cycles(
      new Map([
        ['a.ts', ['b.ts']],
        ['b.ts', []],
      ]),
    ),
    [],
  );
});

t.test('src/ has no import cycle, types included', async (t) => {
  const g = importGraph(SRC);
  t.ok(g.size > 100, `${g.size} modules read`);
  t.ok(
    [...g.values()].some((d) => d.length > 0),
    'imports found',
  );
  const found = cycles(g);
  t.same(
    found.map((c) => `${loopIn(g, c)} (all of: ${c.join(' ')})`),
    [],
    'no cycle',
  );
});

t.test('src/ and the tools built with it (simulators/, bench/tool/) have no import cycle between them', async (t) => {
  const root = resolve(SRC, '..');
  const g = importGraph(root, [SRC, resolve(root, 'simulators'), resolve(root, 'bench', 'tool')]);
  t.ok([...g.keys()].some((f) => f.startsWith('simulators/')) && [...g.keys()].some((f) => f.startsWith('bench/tool/')), 'the tools are read');
  t.same(
    cycles(g).map((c) => `${loopIn(g, c)} (all of: ${c.join(' ')})`),
    [],
    'no cycle',
  );
});

t.test('folders of src/ do not import each other in a circle', async (t) => {
  const g = importGraph(SRC);
  const folder = (f: string) => (f.includes('/') ? f.slice(0, f.indexOf('/')) : f.replace(/\.ts$/, ''));
  const fg = new Map<string, string[]>();
  for (const [f, deps] of g) {
    const from = folder(f);
    const set = new Set(fg.get(from) ?? []);
    for (const d of deps) if (folder(d) !== from) set.add(folder(d));
    fg.set(from, [...set].sort());
  }
  t.same(
    cycles(fg).map((c) => `${loopIn(fg, c)} (all of: ${c.join(' ')})`),
    [],
    'no circle between folders',
  );
});
