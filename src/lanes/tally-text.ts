// The text a usage tally feeds its SSE parser. The relay hands the tallies whole events, which
// never split a UTF-8 sequence, so those are decoded alone; a TextDecoder (whose ICU converter
// costs a few µs to set up, once per stream when every tally made one) is made only for bytes
// of any split, and from then on every piece goes through it, so a sequence it holds is kept.

export class TallyText {
  private decoder: TextDecoder | undefined = undefined;

  /** Bytes of any split: a UTF-8 sequence may continue in the next piece. */
  of(bytes: Uint8Array): string {
    this.decoder ??= new TextDecoder('utf-8');
    return this.decoder.decode(bytes, { stream: true });
  }

  /** Whole events' bytes. */
  ofWhole(bytes: Buffer): string {
    return this.decoder === undefined ? bytes.toString('utf8') : this.decoder.decode(bytes, { stream: true });
  }

  /** What the decoder still holds at the stream's end ('' when none was made). */
  rest(): string {
    return this.decoder?.decode() ?? '';
  }
}
