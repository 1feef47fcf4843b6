// readBounded, the one reader of every non-streaming vendor answer: the whole body when it ends,
// a clear error when it is cut short or grows past its cap, never a hang, and never an error after
// the body was read (its 'close' follows its 'end' on every answer).
import { Readable } from 'node:stream';
import t from 'tap';
import type { Dispatcher } from 'undici';
import { readBounded } from '../../src/vendors/vendor-http.js';

const asBody = (stream: Readable): Dispatcher.ResponseData['body'] => stream as unknown as Dispatcher.ResponseData['body'];

t.test('a body that ends is read whole, its chunks in order, and then closes', async (t) => {
  const stream = Readable.from([Buffer.from('{"a":'), Buffer.from('1}')], { objectMode: false });
  const closed = new Promise((resolveClose) => stream.once('close', resolveClose));
  const bytes = await readBounded(asBody(stream), 1024);
  t.equal(bytes.toString('utf8'), '{"a":1}');
  await closed;
});

t.test('a body destroyed before its end rejects: the answer is not taken for whole', async (t) => {
  const stream = new Readable({ read() {} });
  stream.push(Buffer.from('{"partial":'));
  const reading = readBounded(asBody(stream), 1024);
  stream.destroy();
  await t.rejects(reading, { message: 'vendor body closed before its end' });
});

t.test('a body past its cap rejects naming the cap, and is destroyed', async (t) => {
  const stream = new Readable({ read() {} });
  const reading = readBounded(asBody(stream), 8);
  stream.push(Buffer.from('0123456789'));
  await t.rejects(reading, { message: 'vendor body above 8 bytes' });
  t.ok(stream.destroyed);
});

t.test('a body that errors rejects with its error', async (t) => {
  const stream = new Readable({ read() {} });
  const reading = readBounded(asBody(stream), 1024);
  stream.destroy(new Error('socket reset'));
  await t.rejects(reading, { message: 'socket reset' });
});
