// The project's TypeScript sources, for the tests that read the tree itself (import cycles,
// function lengths).
import { readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** The project's src/ directory. */
export const SRC = resolve(import.meta.dirname, '..', '..', 'src');

/** Every .ts file under `dir`, recursively. */
export function tsSources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsSources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}
