// Reading an `inkgate` command line: the flags and arguments a command takes all come from its
// usage line, so what the operator reads in `inkgate help` is exactly what is accepted. Every
// problem found here is a usage error (exit 2), raised before the database is opened.
import { parseArgs as nodeParseArgs } from 'node:util';
import { UsageError } from './command.js';

export interface ParsedArgs {
  flags: Record<string, string | true>;
  positional: string[];
}

/** Flags every command takes, none with a value. */
export const GLOBAL_FLAGS: Readonly<Record<string, 'boolean'>> = Object.freeze({ json: 'boolean', help: 'boolean' });

/**
 * The flags a command takes, read from its usage line: `--name N` (or `[--name N]`) takes a value,
 * `--name` followed by another flag, a bracket or nothing is a switch.
 */
export function flagsOfUsage(usage: string): Record<string, 'string' | 'boolean'> {
  const raw = usage.split(/\s+/);
  const words = raw.map((w) => w.replace(/^\[+|\]+$/g, ''));
  const out: Record<string, 'string' | 'boolean'> = { ...GLOBAL_FLAGS };
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (!w.startsWith('--')) continue;
    const next = words[i + 1];
    const closed = raw[i]!.endsWith(']');
    const takesValue = !closed && next !== undefined && next !== '' && !next.startsWith('--') && !raw[i + 1]!.startsWith('[');
    out[w.slice(2)] = takesValue ? 'string' : 'boolean';
  }
  return out;
}

/** What a usage line requires: flags outside brackets, and the arguments (a|b|c: one of those words). */
interface Required {
  flags: string[];
  positional: { name: string; choices?: string[] }[];
}

/** `commandWords` words of the usage line are the command's name; the rest is read here. */
function requiredOfUsage(usage: string, commandWords: number): Required {
  const raw = usage.split(/\s+/).slice(commandWords);
  const flags = flagsOfUsage(usage);
  const out: Required = { flags: [], positional: [] };
  let depth = 0;
  for (let i = 0; i < raw.length; i++) {
    const word = raw[i]!;
    const optional = depth > 0 || word.startsWith('[');
    depth += (word.match(/\[/g)?.length ?? 0) - (word.match(/\]/g)?.length ?? 0);
    const bare = word.replace(/^\[+|\]+$/g, '');
    if (bare.startsWith('--')) {
      const name = bare.slice(2);
      if (!optional) out.flags.push(name);
      // A value-taking flag's next word is its value, not an argument.
      if (flags[name] === 'string') {
        const value = raw[++i]!;
        depth += (value.match(/\[/g)?.length ?? 0) - (value.match(/\]/g)?.length ?? 0);
      }
    } else if (!optional) {
      out.positional.push(bare.includes('|') ? { name: bare, choices: bare.split('|') } : { name: bare });
    }
  }
  return out;
}

/**
 * Checks a parsed command line against its usage line: each required flag given, each argument
 * given (and one of its choices where the usage line lists them), no argument more.
 */
export function checkAgainstUsage(usage: string, commandWords: number, args: ParsedArgs): void {
  const need = requiredOfUsage(usage, commandWords);
  for (const f of need.flags) if (args.flags[f] === undefined) throw new UsageError(`--${f} is required`);
  const given = args.positional.slice(commandWords);
  need.positional.forEach((expected, index) => {
    const v = given[index];
    if (v === undefined) throw new UsageError(expected.choices ? `say which: ${expected.choices.join(', ')}` : `${expected.name} is required`);
    if (expected.choices && !expected.choices.includes(v)) throw new UsageError(`${JSON.stringify(v)} is not one of ${expected.choices.join(', ')}`);
  });
  if (given.length > need.positional.length) throw new UsageError(`unexpected argument ${JSON.stringify(given[need.positional.length])}`);
}

/**
 * Parses argv against the flags a command declares (node's parseArgs, strict): an unknown flag
 * (a typo such as --ink-limt) and a flag that takes a value but has none (a bare --ink-limit, or
 * one followed by another flag) are refused, so a mistyped cap can never create a key without one.
 * A flag given twice is refused too: which one wins would be a guess.
 */
export function parseArgs(argv: string[], flags: Readonly<Record<string, 'string' | 'boolean'>> = GLOBAL_FLAGS): ParsedArgs {
  const options: Record<string, { type: 'string' | 'boolean' }> = {};
  for (const [k, type] of Object.entries(flags)) options[k] = { type };
  let parsed;
  try {
    parsed = nodeParseArgs({ args: argv, options, strict: true, allowPositionals: true, tokens: true });
  } catch (e) {
    throw new UsageError(cliMessage(e));
  }
  const seen = new Set<string>();
  for (const tok of parsed.tokens) {
    if (tok.kind !== 'option') continue;
    if (seen.has(tok.name)) throw new UsageError(`--${tok.name} is given twice`);
    seen.add(tok.name);
  }
  const out: Record<string, string | true> = Object.create(null) as Record<string, string | true>;
  for (const [k, v] of Object.entries(parsed.values)) {
    if (v === true || typeof v === 'string') out[k] = v;
  }
  return { flags: out, positional: parsed.positionals };
}

/** node's parse errors name the flag in a long sentence; the operator gets one short line. */
function cliMessage(error: unknown): string {
  const msg = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: string }).code;
  const flag = /'(-{1,2}[^' ]+)/.exec(msg)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown flag ${flag ?? msg}; run inkgate help`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    if (/ambiguous/.test(msg)) return `${flag ?? 'a flag'} needs a value (a value starting with - is written ${flag ?? '--flag'}=-...)`;
    if (/argument missing/.test(msg)) return `${flag ?? 'a flag'} needs a value`;
    return `${flag ?? 'a flag'} takes no value`;
  }
  return msg.split('\n')[0]!;
}

/** A required flag's value; a usage error naming the flag when it is missing or empty. */
export function need(args: Pick<ParsedArgs, 'flags'>, name: string): string {
  const v = args.flags[name];
  if (typeof v !== 'string' || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

/** The command words: the leading words before the first flag (global switches may come first). */
export function commandWords(argv: string[]): string[] {
  const words: string[] = [];
  for (const a of argv) {
    if (a.startsWith('--') && Object.hasOwn(GLOBAL_FLAGS, a.slice(2))) continue;
    if (a.startsWith('-')) break;
    words.push(a);
  }
  return words;
}
