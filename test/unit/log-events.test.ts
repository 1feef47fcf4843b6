// The logging convention (docs/operations.md#logs): every `msg` is an event id from the one frozen
// table (src/util/log-events.ts), the docs' table mirrors it row for row, and the logger writes in
// pino's order with its children's bindings on every line.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import t from 'tap';
import { LOG_EVENTS, levelOf } from '../../src/util/log-events.js';
import { createLogger, eventSink } from '../../src/util/log.js';
import { SRC, tsSources } from '../helpers/source-tree.js';

const ids = Object.keys(LOG_EVENTS);
/** Dotted literals of a logging area that are API names, not events (a request's fields, an object type). */
const NOT_EVENTS = new Set(['video.generation', 'text.format', 'text.verbosity']);
const areas = new Set(ids.map((id) => id.split('.')[0]!));
const sources = tsSources(SRC)
  .filter((f) => !f.endsWith('/util/log-events.ts'))
  .map((f) => ({ file: relative(SRC, f), text: readFileSync(f, 'utf8') }));

/**
 * The event ids the code writes, with where: every literal shaped like an id of a known area
 * (`'ledger.flush_failed'`, wherever it is passed: a logger, a `(fields, event)` callback, a
 * helper that logs it later), every literal a logger is called with alone (`log.warn('...')`; the formatter may add a trailing comma), and
 * every literal a `log('...'` callback gets (the ledger's): prose there is caught as well.
 */
function eventsUsed(): Map<string, string> {
  const used = new Map<string, string>();
  const patterns = [
    /'([a-z][a-z0-9]*\.[a-z][a-z0-9_]*)'/g,
    /\.(?:debug|info|warn|error|fatal)\(\s*['"`]([^'"`]*)['"`]\s*,?\s*\)/g,
    /\blog\??\.?\(\s*['"`]([^'"`]*)['"`]/g,
    /\}\s*,\s*['"`]([^'"`]*)['"`]\s*,?\s*\);/g,
  ];
  for (const { file, text } of sources) {
    for (const [n, re] of patterns.entries()) {
      for (const m of text.matchAll(re)) {
        const id = m[1]!;
        // The first pattern finds any dotted literal: only those of a logging area are event ids.
        if (n === 0 && (!areas.has(id.split('.')[0]!) || NOT_EVENTS.has(id))) continue;
        // The last one finds `}, 'literal');` calls of any kind: only where a logger is called.
        if (n === 3 && !/\.(?:debug|info|warn|error|fatal)\(\s*\{/.test(text.slice(Math.max(0, m.index - 600), m.index))) continue;
        if (!used.has(id)) used.set(id, file);
      }
    }
  }
  return used;
}

t.test('every event id used in src/ is in the table', async (t) => {
  const used = eventsUsed();
  t.ok(used.size >= ids.length / 2, `the scan finds the code's ids (${used.size})`);
  t.ok(used.has('ledger.flush_failed') && used.has('ledger.usage_unknown_gave_up'), "the ledger's ids are among them");
  for (const [id, file] of used) {
    t.ok(Object.hasOwn(LOG_EVENTS, id), `${id} (${file}) is in src/util/log-events.ts`);
  }
});

t.test('every id in the table is used somewhere in src/, and is `area.event_name` in snake case', async (t) => {
  const all = sources.map((s) => s.text).join('\n');
  for (const id of ids) {
    t.match(id, /^[a-z][a-z0-9]*\.[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/, `${id}: area.event_name`);
    t.ok(all.includes(`'${id}'`), `${id} is written by the code`);
  }
});

t.test('docs/operations.md lists the same events, level and meaning, in the same order', async (t) => {
  const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const start = doc.indexOf('\n## Logs\n');
  const section = doc.slice(start, doc.indexOf('\n## ', start + 1));
  const rows = [...section.matchAll(/^\| `([a-z0-9_.]+)` \| (debug|info|warn|error|fatal) \| (.+) \|$/gm)];
  t.same(
    rows.map((m) => [m[1], m[2], m[3]!.replaceAll('\\|', '|')]),
    Object.entries(LOG_EVENTS).map(([id, s]) => [id, s.level, s.meaning]),
  );
});

t.test('the table is frozen', async (t) => {
  t.ok(Object.isFrozen(LOG_EVENTS));
  t.ok(Object.isFrozen(LOG_EVENTS['ledger.fail_stop']));
  t.throws(() => {
    (LOG_EVENTS as any)['ledger.fail_stop'].level = 'info';
  });
  t.equal(levelOf('ledger.lease_recovered'), 'info', 'a lease recovered is normal operation');
  t.equal(levelOf('ledger.fail_stop'), 'fatal', 'a broken money rule stops the process');
  t.equal(levelOf('toString'), undefined, 'no inherited name passes for an id');
});

/** A debug logger whose lines are kept, parsed. */
function recorder() {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, log: createLogger('debug', (l) => void lines.push(JSON.parse(l) as Record<string, unknown>)) };
}

t.test("the logger writes (fields, msg) in pino's order, with each child's bindings", async (t) => {
  const { lines, log } = recorder();
  const request = log.child({ request_id: 'req_1' });
  const keyed = request.child({ key_prefix: 'svc_AbCdEfGh' });
  keyed.warn({ reason: 'no usage receipt', err: Object.assign(new Error('boom'), { code: 'E1' }) }, 'text.hold_left_open');
  request.info('http.drain_timed_out');
  log.fatal({ step: 'store' }, 'gateway.start_failed');
  request.debug({ key: 'svc_secret' }, 'http.request');
  t.match(lines[0], { level: 'warn', msg: 'text.hold_left_open', request_id: 'req_1', key_prefix: 'svc_AbCdEfGh', reason: 'no usage receipt' });
  t.same(lines[0]!.err, { message: 'boom', code: 'E1' }, 'an Error is its message and code only');
  t.same(Object.keys(lines[1]!).sort(), ['level', 'msg', 'request_id', 'time'], 'a message alone: only the bindings with it');
  t.match(lines[1], { level: 'info', msg: 'http.drain_timed_out', request_id: 'req_1' });
  t.match(lines[2], { level: 'fatal', msg: 'gateway.start_failed', step: 'store' });
  t.notOk('request_id' in lines[2]!, "a parent does not get its child's bindings");
  t.equal(lines[3]!.key, '[redacted]', 'a child keeps the redaction');
  t.equal(lines.length, 4);
});

t.test("a (fields, event) callback writes each event at the table's level", async (t) => {
  const { lines, log } = recorder();
  const sink = eventSink(log.child({ component: 'ledger' }));
  sink({ lease_id: 7 }, 'ledger.lease_recovered');
  sink({ err: 'x' }, 'ledger.fail_stop');
  sink({}, 'ledger.flush_failed');
  // A name missing from the table does not compile (the type check runs with the lint).
  const unknownName = (): void => {
    // @ts-expect-error 'ledger.not_in_the_table' is not an event of log-events.ts
    sink({ n: 1 }, 'ledger.not_in_the_table');
  };
  void unknownName;
  t.same(
    lines.map((l) => [l.level, l.msg, l.component]),
    [
      ['info', 'ledger.lease_recovered', 'ledger'],
      ['fatal', 'ledger.fail_stop', 'ledger'],
      ['error', 'ledger.flush_failed', 'ledger'],
    ],
    'each at its level',
  );
  t.equal(lines[0]!.lease_id, 7);
});
