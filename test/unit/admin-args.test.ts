// The admin CLI's flag table comes from each command's usage line, so every command (present and
// future) is parsed strictly without a table of its own.
import t from 'tap';
import { commands, flagsOfUsage, parseArgs } from '../../src/admin/cli.js';

t.test('flags are read from the usage line', async (t) => {
  t.same(flagsOfUsage('key create --account A --name N [--ink-limit N] [--expires ISO]'), {
    json: 'boolean',
    help: 'boolean',
    account: 'string',
    name: 'string',
    'ink-limit': 'string',
    expires: 'string',
  });
  t.same(flagsOfUsage('thing do [--dry-run] [--ttl-s S]'), { json: 'boolean', help: 'boolean', 'dry-run': 'boolean', 'ttl-s': 'string' });
  t.same(flagsOfUsage('thing do --force --to X'), { json: 'boolean', help: 'boolean', force: 'boolean', to: 'string' });
  t.same(flagsOfUsage('reconcile --file records.jsonl [--older-than-s S]'), { json: 'boolean', help: 'boolean', file: 'string', 'older-than-s': 'string' });
});

t.test('every command in the table parses its own usage example', async (t) => {
  for (const [name, c] of Object.entries(commands)) {
    const flags = flagsOfUsage(c.usage);
    const argv = c.usage.split(/\s+/).map((w) => w.replace(/^\[+|\]+$/g, ''));
    const parsed = parseArgs(argv, flags);
    t.same(parsed.positional.slice(0, name.split(' ').length), name.split(' '), name);
  }
});

t.test('strict parsing refuses typos and missing values', async (t) => {
  const flags = flagsOfUsage('key create --account A --name N [--ink-limit N]');
  t.throws(() => parseArgs(['key', 'create', '--ink-limt', '5'], flags), /unknown flag --ink-limt/);
  t.throws(() => parseArgs(['key', 'create', '--ink-limit'], flags), /--ink-limit needs a value/);
  t.throws(() => parseArgs(['key', 'create', '--ink-limit', '--name', 'x'], flags), /--ink-limit needs a value/);
  t.throws(() => parseArgs(['key', 'create', '--json=1'], flags), /--json takes no value/);
  t.throws(() => parseArgs(['key', 'create', '--name', 'a', '--name', 'b'], flags), /--name is given twice/);
  t.same(parseArgs(['key', 'create', '--name', 'a b', '--ink-limit=7', '--json'], flags), {
    flags: { name: 'a b', 'ink-limit': '7', json: true },
    positional: ['key', 'create'],
  });
});
