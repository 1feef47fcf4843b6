// The configuration blocks of docs/clients.md, as the agent tests use them: each block follows a
// `<!-- snippet: NAME -->` line. Reading them from the page (rather than keeping a copy here) is what
// makes the page's settings the tested ones. The page's address and key placeholders are replaced
// by the test's own.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PAGE = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'clients.md');
/** The gateway address the page's examples use. */
export const DOC_ORIGIN = 'http://127.0.0.1:8080';
/** The environment variable the page's examples read the key from. */
export const DOC_KEY_VAR = 'INKGATE_KEY';

/** The fenced block right after `<!-- snippet: name -->`; throws when the page lacks it. */
export function docSnippet(name: string): string {
  const text = readFileSync(PAGE, 'utf8');
  const marker = `<!-- snippet: ${name} -->`;
  const at = text.indexOf(marker);
  if (at === -1) throw new Error(`docs/clients.md has no block named ${name}`);
  const m = /^\s*```[a-z]*\n([\s\S]*?)\n```/.exec(text.slice(at + marker.length));
  if (!m) throw new Error(`docs/clients.md: no fenced block follows ${marker}`);
  return m[1]!;
}

/** A block with the page's gateway address replaced by `origin`. */
export function docSnippetFor(name: string, origin: string): string {
  return docSnippet(name).replaceAll(DOC_ORIGIN, origin);
}

/**
 * The `export NAME=VALUE` lines of a shell block as an environment: quotes dropped, `$INKGATE_KEY`
 * replaced by `key`, the page's address by `origin`. Any other line form throws, so the page cannot
 * grow a line the test would silently skip.
 */
export function docEnv(name: string, origin: string, key: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of docSnippet(name).split('\n')) {
    if (line.trim() === '') continue;
    const m = /^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!m) throw new Error(`docs/clients.md ${name}: not an export line: ${line}`);
    const value = m[2]!
      .replace(/^"(.*)"$/, '$1')
      .replaceAll(`$${DOC_KEY_VAR}`, key)
      .replaceAll(DOC_ORIGIN, origin);
    env[m[1]!] = value;
  }
  return env;
}
