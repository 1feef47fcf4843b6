// Sorts the first request of a connection for the HTTP front (http-front.ts): uWS answers only
// HTTP/1.1 request lines with a Host and at most 48 header fields; anything else it leaves
// unanswered until its idle timeout. What it can answer goes to it untouched.

/** Header fields a request may carry (both paths): 46 leaves room for the Host and Connection the
 *  front adds when it forwards an HTTP/1.0 request, under uWS's own ceiling of 48. */
export const MAX_HEADER_FIELDS = 46;
/** The first request's head is read up to this many bytes: uWS serves a head of up to about 125 KiB
 *  and resets a longer one, so what it would serve is never refused here. */
export const MAX_HEAD_BYTES = 124 * 1024;

export type HeadVerdict = 'uws' | 'node' | 'incomplete';

const CRLF = 0x0a0d; // "\r\n" read little-endian
/** `token SP target SP HTTP/1.1`: the request lines uWS parses. */
const UWS_REQUEST_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^ ]+ HTTP\/1\.1$/;

/** True when the line at [start, end) begins with `host:` (any case). */
function isHostLine(buf: Buffer, start: number, end: number): boolean {
  if (end - start < 5 || buf[start + 4] !== 0x3a) return false;
  return buf.toString('latin1', start, start + 4).toLowerCase() === 'host';
}

/**
 * 'uws': an HTTP/1.1 request line, a Host, at most MAX_HEADER_FIELDS fields; 'node': anything
 * else with a complete head, or a head longer than MAX_HEAD_BYTES; 'incomplete': read more.
 * Only the first MAX_HEAD_BYTES are looked at, and nothing is allocated but the request line.
 */
export function sortHead(buf: Buffer): HeadVerdict {
  const limit = Math.min(buf.length, MAX_HEAD_BYTES);
  let end = buf.indexOf('\r\n', 0, 'latin1');
  if (end < 0 || end + 2 > limit) return buf.length >= MAX_HEAD_BYTES ? 'node' : 'incomplete';
  const lineOk = UWS_REQUEST_LINE.test(buf.toString('latin1', 0, end));
  let fields = 0;
  let host = false;
  for (let start = end + 2; ; start = end + 2) {
    if (start + 2 > limit) return buf.length >= MAX_HEAD_BYTES ? 'node' : 'incomplete';
    if (buf.readUInt16LE(start) === CRLF) break; // the empty line: the head is complete
    end = buf.indexOf('\r\n', start, 'latin1');
    if (end < 0 || end + 2 > limit) return buf.length >= MAX_HEAD_BYTES ? 'node' : 'incomplete';
    fields++;
    if (isHostLine(buf, start, end)) host = true;
  }
  return lineOk && host && fields <= MAX_HEADER_FIELDS ? 'uws' : 'node';
}
