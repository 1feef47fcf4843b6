// The vendors' usual SSE event, read from its bytes: `event: <name>\ndata: <one line>\n\n`. The
// relay hands a tally whole events (the framer cut them), and most of a stream is text deltas of
// exactly this shape, so a tally can pass over them without decoding the bytes to text or running
// the full SSE parser, which is what cost the stream most per relayed chunk after the socket write.
// Anything of another shape (a CR anywhere in the chunk, several data lines, comments, an id, a
// data-only frame) goes to the full parser, event by event, in order: every byte reaches exactly
// one of the two, and the parser only ever starts on an event's first byte.
//
// Cost: a byte compare of the opening and one LF search per event; nothing is allocated.

const LF = 0x0a;
const CR = 0x0d;

/** The bytes `event: <name>\ndata: `, the opening of an event of the usual shape (made at start-up). */
export function eventOpening(name: string): Buffer {
  return Buffer.from(`event: ${name}\ndata: `, 'latin1');
}

/** True when `events` has no CR, so that every line ends with LF and every event with "\n\n". */
function lfOnly(events: Uint8Array): boolean {
  return events.indexOf(CR) === -1;
}

/**
 * The end (exclusive, after its blank line) of the event starting at `from` in an LF-only chunk of
 * whole events; the chunk's length when no blank line follows (a chunk that ends mid-event).
 */
function eventEnd(events: Buffer, from: number): number {
  let lineStart = from;
  for (;;) {
    const lf = events.indexOf(LF, lineStart);
    if (lf === -1) return events.length;
    if (lf === lineStart) return lf + 1;
    lineStart = lf + 1;
  }
}

/**
 * Which of `openings` the event `[from, end)` has, when it has exactly the usual shape (that
 * opening, one data line, then its blank line); -1 when it has another shape.
 */
function plainOpening(events: Buffer, from: number, end: number, openings: readonly Buffer[]): number {
  for (let which = 0; which < openings.length; which++) {
    const opening = openings[which]!;
    const dataStart = from + opening.length;
    if (dataStart > end || events.compare(opening, 0, opening.length, from, dataStart) !== 0) continue;
    return events.indexOf(LF, dataStart) === end - 2 ? which : -1;
  }
  return -1;
}

/** Reads an event of the usual shape (its data `[dataStart, dataEnd)`) from its bytes: false hands it to the parser. */
export type PlainReader = (events: Buffer, dataStart: number, dataEnd: number) => boolean;

/**
 * Hands a chunk of whole events to `read` where an event has the usual shape with one of
 * `openings`, and the rest to `parse`, in the stream's order, in contiguous runs (the whole chunk
 * when it holds a CR). Returns how many events `read` took.
 */
export function splitEvents(events: Buffer, openings: readonly Buffer[], read: PlainReader, parse: (bytes: Buffer) => void): number {
  if (!lfOnly(events)) {
    parse(events);
    return 0;
  }
  let taken = 0;
  let parseFrom = 0;
  for (let at = 0; at < events.length; ) {
    const end = eventEnd(events, at);
    const which = plainOpening(events, at, end, openings);
    if (which !== -1) {
      // What comes before this event reaches the parser before this event is read.
      if (parseFrom < at) parse(events.subarray(parseFrom, at));
      parseFrom = at;
      if (read(events, at + openings[which]!.length, end - 2)) {
        taken++;
        parseFrom = end;
      }
    }
    at = end;
  }
  if (parseFrom < events.length) parse(parseFrom === 0 ? events : events.subarray(parseFrom));
  return taken;
}

/** Where `needle` first starts in `bytes[from, end)`, or -1: a search that never looks past `end`. */
export function indexWithin(bytes: Buffer, needle: Buffer, from: number, end: number): number {
  const first = needle[0];
  const last = end - needle.length;
  for (let i = from; i <= last; i++) {
    if (bytes[i] !== first) continue;
    let k = 1;
    while (k < needle.length && bytes[i + k] === needle[k]) k++;
    if (k === needle.length) return i;
  }
  return -1;
}
