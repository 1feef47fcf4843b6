// Sorts the first request of a connection for the HTTP front (http-front.ts): uWS answers only
// HTTP/1.1 request lines with an origin-form target, a Host, at most 48 header fields, each a
// `token ":" value` line ended by CRLF; anything else it leaves unanswered until its idle timeout
// (an absolute-form target, `OPTIONS *`, obs-fold, a bare CR or LF...). What it can answer goes
// to it untouched; the rest to node:http, which answers or refuses it with 400.

/** Header fields a request may carry (both paths): 46 leaves room for the Host and Connection the
 *  front adds when it forwards an HTTP/1.0 request, under uWS's own ceiling of 48. */
export const MAX_HEADER_FIELDS = 46;
/** The first request's head is read up to this many bytes: uWS serves a head of up to about 125 KiB
 *  and resets a longer one, so what it would serve is never refused here. */
export const MAX_HEAD_BYTES = 124 * 1024;

export type HeadVerdict = 'uws' | 'node' | 'incomplete';

const CRLF = 0x0a0d; // "\r\n" read little-endian
const CR = 0x0d;
const LF = 0x0a;
/** `token SP origin-form SP HTTP/1.1`: the request lines uWS parses (no controls, no space, no tab). */
const UWS_REQUEST_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ \/[!-~\x80-\xff]* HTTP\/1\.1$/;

/** 1 for the bytes of an RFC 9110 token (a field name). */
const TOKEN = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") TOKEN[c.charCodeAt(0)] = 1;

/** True when the line at [start, end) (ended by the CRLF at `end`) is `token ":" value` with no bare CR or LF. */
function isFieldLine(buf: Buffer, start: number, end: number): boolean {
  let i = start;
  while (i < end && TOKEN[buf[i]!] === 1) i++;
  if (i === start || i === end || buf[i] !== 0x3a) return false; // obs-fold, no name, no colon
  return buf.indexOf(CR, i) === end && buf.indexOf(LF, i) === end + 1;
}

/** True when the first LF in the first `limit` bytes has no CR before it (a bare-LF head, which uWS never ends). */
function bareLf(buf: Buffer, limit: number): boolean {
  const lf = buf.indexOf(LF);
  return lf >= 0 && lf < limit && (lf === 0 || buf[lf - 1] !== CR);
}

/** True when the line at [start, end) begins with `host:` (any case). */
function isHostLine(buf: Buffer, start: number, end: number): boolean {
  if (end - start < 5 || buf[start + 4] !== 0x3a) return false;
  return buf.toString('latin1', start, start + 4).toLowerCase() === 'host';
}

/**
 * 'uws': an HTTP/1.1 request line, a Host, at most MAX_HEADER_FIELDS well-formed fields; 'node':
 * anything else with a complete head, a head longer than MAX_HEAD_BYTES, or as soon as a line
 * uWS cannot parse is seen (node:http reads the rest); 'incomplete': read more.
 * Only the first MAX_HEAD_BYTES are looked at, and nothing is allocated but the request line.
 */
export function sortHead(buf: Buffer): HeadVerdict {
  const limit = Math.min(buf.length, MAX_HEAD_BYTES);
  if (bareLf(buf, limit)) return 'node';
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
    if (!isFieldLine(buf, start, end)) return 'node';
    fields++;
    if (isHostLine(buf, start, end)) host = true;
  }
  return lineOk && host && fields <= MAX_HEADER_FIELDS ? 'uws' : 'node';
}
