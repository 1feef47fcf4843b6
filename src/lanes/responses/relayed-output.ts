// What a Responses stream relayed of its output, for the terminal snapshot of a stream the
// service stops at its own output cap (see RelayedOutput).
import { count, isObject, scanCount } from './raw-json.js';
import type { DeltaSpan } from './delta-scan.js';
import { scanCountBytes } from './delta-scan-bytes.js';

const OUTPUT_INDEX_KEY = '"output_index":';
const CONTENT_INDEX_KEY = '"content_index":';
const OUTPUT_INDEX_BYTES = Buffer.from(OUTPUT_INDEX_KEY, 'latin1');
const CONTENT_INDEX_BYTES = Buffer.from(CONTENT_INDEX_KEY, 'latin1');

/** Item events the output keeper parses (a few per output item; the text itself comes from the deltas). */
export const KEPT_ITEM_EVENTS: ReadonlySet<string> = new Set(['response.output_item.added', 'response.content_part.added', 'response.output_item.done']);

/** An `output_text` part a message item opened; its text is the deltas that name it. */
interface KeptPart {
  readonly part: Record<string, unknown>;
}

interface KeptItem {
  /** The item as `output_item.added` announced it, or as `output_item.done` finished it. */
  readonly item: Record<string, unknown>;
  readonly done: boolean;
  /** By content_index; only `output_text` parts of unfinished message items. */
  readonly parts: Array<KeptPart | undefined>;
}

/** Pieces of text since the last compaction above which they are joined, part by part. */
const COMPACT_PIECES = 512;

/**
 * What a Responses stream relayed of its output, kept so a stream the service stops at its own cap
 * can end with a terminal snapshot that carries it (the official SDK's final response is that
 * snapshot: `finalResponse().output_text` is read from it). Kept: the first response snapshot (raw,
 * for the fields every response has), items that had `output_item.done` (as sent), and message
 * items still open with the text of their `output_text` deltas. An unfinished item of another
 * kind (a function call with half its arguments, a reasoning item without its encrypted content)
 * is not kept: no client could use it.
 *
 * Cost on the hot path: a text delta adds one substring (its still-escaped JSON text, decoded once
 * in `build`) and two array slots; the rest is per item. Memory: the relayed text (bounded by the
 * cap, plus one chunk) and the first snapshot's JSON text (the parser made it already).
 * `mark()` / `rewind()` bracket one chunk: the proxy does not relay the chunk that passes the cap,
 * so what that chunk added is taken back.
 */
export class RelayedOutput {
  private snapshotJson: string | undefined;
  private readonly items: Array<KeptItem | undefined> = [];
  /** Escaped text of deltas, in order, each with the part it belongs to (parallel arrays). */
  private readonly pieces: string[] = [];
  private readonly owners: KeptPart[] = [];
  private compactedTo = 0;
  private markPieces = 0;
  /** Slot writes since the mark, as (array, index, previous value) triplets. */
  private readonly journal: unknown[] = [];
  private frozen = false;
  /**
   * The one open `output_text` part, when exactly one is (nearly always: items stream one after
   * the other); null when several are, and a delta's indexes must be read to place it.
   */
  private sole: KeptPart | undefined | null;

  /** Start of a chunk: everything kept so far was relayed. */
  mark(): void {
    if (this.frozen) return;
    if (this.pieces.length - this.compactedTo >= COMPACT_PIECES) this.compact();
    this.markPieces = this.pieces.length;
    this.journal.length = 0;
  }

  /** Takes back what the chunk since `mark()` added, and keeps nothing more. */
  rewind(): void {
    if (this.frozen) return;
    const j = this.journal;
    for (let i = j.length - 3; i >= 0; i -= 3) (j[i] as unknown[])[j[i + 1] as number] = j[i + 2];
    j.length = 0;
    this.pieces.length = this.markPieces;
    this.owners.length = this.markPieces;
    this.frozen = true;
    this.recount();
  }

  snapshot(data: string): void {
    if (!this.frozen && this.snapshotJson === undefined) this.snapshotJson = data;
  }

  /** A text delta whose escaped text is `data.slice(start, end)` (the fast path: nothing parsed). */
  delta(data: string, start: number, end: number): void {
    if (this.frozen) return;
    const part = this.sole !== null ? this.sole : this.items[scanCount(data, OUTPUT_INDEX_KEY)]?.parts[scanCount(data, CONTENT_INDEX_KEY)];
    if (part === undefined) return;
    this.pieces.push(data.slice(start, end));
    this.owners.push(part);
  }

  /** `delta` for an event read from its bytes: its data is `bytes[dataStart, dataEnd)`, its escaped text at `text`. */
  deltaBytes(bytes: Buffer, dataStart: number, dataEnd: number, text: DeltaSpan): void {
    if (this.frozen) return;
    const part =
      this.sole !== null
        ? this.sole
        : this.items[scanCountBytes(bytes, dataStart, dataEnd, OUTPUT_INDEX_BYTES)]?.parts[scanCountBytes(bytes, dataStart, dataEnd, CONTENT_INDEX_BYTES)];
    if (part === undefined) return;
    this.pieces.push(bytes.toString('utf8', text.start, text.end));
    this.owners.push(part);
  }

  /** A text delta read by JSON.parse (data-only frames, unusual escapes). */
  text(outputIndex: number, contentIndex: number, escaped: string): void {
    if (this.frozen) return;
    const part = this.items[outputIndex]?.parts[contentIndex];
    if (part === undefined) return;
    this.pieces.push(escaped);
    this.owners.push(part);
  }

  itemEvent(type: string, event: Record<string, unknown>): void {
    if (this.frozen) return;
    const oi = count(event.output_index);
    if (oi === undefined) return;
    if (type === 'response.content_part.added') {
      const kept = this.items[oi];
      const ci = count(event.content_index);
      if (kept === undefined || kept.done || ci === undefined || !isObject(event.part) || event.part.type !== 'output_text') return;
      this.set(kept.parts, ci, { part: event.part });
      this.recount();
      return;
    }
    if (!isObject(event.item)) return;
    const done = type === 'response.output_item.done';
    this.set(this.items, oi, { item: event.item, done, parts: [] });
    this.recount();
  }

  /** Finds the sole open part again (after an item event: a few per item, over the few items). */
  private recount(): void {
    let found: KeptPart | undefined;
    let n = 0;
    for (const it of this.items) {
      if (it === undefined || it.done) continue;
      for (const p of it.parts) {
        if (p === undefined) continue;
        found = p;
        n++;
      }
    }
    this.sole = n <= 1 ? found : null;
  }

  private set<T>(arr: Array<T | undefined>, index: number, value: T): void {
    this.journal.push(arr, index, arr[index]);
    arr[index] = value;
  }

  /** Joins the pieces since the last compaction, run by run of the same part. */
  private compact(): void {
    const p = this.pieces;
    const o = this.owners;
    let w = this.compactedTo;
    for (let r = w; r < p.length; ) {
      let e = r + 1;
      while (e < p.length && o[e] === o[r]) e++;
      p[w] = e - r === 1 ? p[r]! : p.slice(r, e).join('');
      o[w] = o[r]!;
      w++;
      r = e;
    }
    p.length = w;
    o.length = w;
    this.compactedTo = w;
  }

  /** The first snapshot (parsed; undefined when none arrived) and the output items, as the API shapes them. */
  build(): { snapshot: Record<string, unknown> | undefined; output: Record<string, unknown>[] } {
    let snapshot: Record<string, unknown> | undefined;
    if (this.snapshotJson !== undefined) {
      try {
        const parsed: unknown = JSON.parse(this.snapshotJson);
        if (isObject(parsed) && isObject(parsed.response)) snapshot = parsed.response;
      } catch {
        /* the client's SDK saw the same bytes; the synthetic response goes without it */
      }
    }
    const texts = new Map<KeptPart, string[]>();
    for (let i = 0; i < this.pieces.length; i++) {
      const owner = this.owners[i]!;
      const list = texts.get(owner);
      if (list) list.push(this.pieces[i]!);
      else texts.set(owner, [this.pieces[i]!]);
    }
    const output: Record<string, unknown>[] = [];
    for (const kept of this.items) {
      if (kept === undefined) continue;
      if (kept.done) {
        output.push(kept.item);
        continue;
      }
      if (kept.item.type !== 'message') continue;
      const content: Record<string, unknown>[] = [];
      for (const p of kept.parts) {
        if (p !== undefined) content.push({ ...p.part, text: decodeEscaped(texts.get(p)?.join('') ?? '') });
      }
      output.push({ ...kept.item, status: 'incomplete', content });
    }
    return { snapshot, output };
  }
}

/** The text of a JSON string body (between the quotes); every piece was a well-formed one. */
function decodeEscaped(raw: string): string {
  try {
    return JSON.parse('"' + raw + '"') as string;
  } catch {
    return '';
  }
}
