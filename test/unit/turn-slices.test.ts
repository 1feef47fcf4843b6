// Request starts in slices of the serving thread's time: a burst of starts queued in one turn runs
// a slice at a time, the loop polls for I/O between slices (a ping-pong over a real TCP socket
// advances during the burst), and the starts run in the order they were queued. Time is the
// behaviour under test here: each start spins the thread for a set time, as a request's own
// synchronous work would.
import { once } from 'node:events';
import { createServer, type Socket, connect } from 'node:net';
import t from 'tap';
import { START_SLICE_MS, TurnSlices } from '../../src/server/turn-slices.js';

function spin(ms: number): void {
  const untilMs = performance.now() + ms;
  while (performance.now() < untilMs);
}

t.test('a fresh turn opens a slice; a spent slice defers; the next turn opens another', async (t) => {
  const slices = new TurnSlices(5);
  // Read first, asserted after: an assertion's own first run can take milliseconds.
  const first = slices.take();
  const second = slices.take();
  spin(6);
  const spent = slices.take();
  t.ok(first, 'the first start of a turn runs');
  t.ok(second, 'a second start in the same slice runs');
  t.notOk(spent, 'a start after the slice is spent waits');
  t.equal(slices.deferred, 1);
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.ok(slices.take(), 'a later turn opens a new slice');
  t.equal(START_SLICE_MS, 5, 'the serving thread gives a slice 5 ms');
});

t.test('a burst of starts queued in one turn: I/O runs between slices, the starts keep their order', async (t) => {
  // A ping-pong over loopback TCP: each byte the server gets is echoed, each echo sent back. Its
  // count only moves when the loop polls for I/O.
  const peers: Socket[] = [];
  const server = createServer((s: Socket) => {
    peers.push(s);
    s.on('data', (b) => s.write(b));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = connect((server.address() as { port: number }).port, '127.0.0.1');
  await once(client, 'connect');
  t.teardown(() => {
    client.destroy();
    for (const p of peers) p.destroy();
    server.close();
  });
  let pongs = 0;
  let playing = true;
  client.on('data', () => {
    pongs++;
    if (playing) client.write('x');
  });
  client.write('x');
  while (pongs < 3) await once(client, 'data');

  const slices = new TurnSlices(5);
  const STARTS = 60;
  const START_MS = 1;
  const ran: number[] = [];
  const pongsAt: number[] = [];
  let finished!: () => void;
  const allRan = new Promise<void>((r) => (finished = r));
  const start = (i: number): void => {
    ran.push(i);
    pongsAt.push(pongs);
    spin(START_MS);
    if (ran.length === STARTS) finished();
  };
  // All queued from one callback, as a burst parsed in one turn queues its starts.
  setImmediate(() => {
    for (let i = 0; i < STARTS; i++) slices.run(start, i);
  });
  await allRan;
  playing = false;

  t.same(
    ran,
    Array.from({ length: STARTS }, (_, i) => i),
    'every start ran once, in the order queued',
  );
  t.ok(slices.deferred > 0, `starts were deferred (${slices.deferred})`);
  const during = pongsAt[STARTS - 1]! - pongsAt[0]!;
  // Unsliced, 60 ms of starts would run back to back and the ping-pong would not move at all.
  t.ok(during >= 1, `the ping-pong moved ${during} times while the burst was starting`);
});
