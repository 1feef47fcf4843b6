// What a usage tally feeds its SSE parser, and the one fact about it both tallies need: whether the
// last character fed was a CR (the parser holds it back, as it may still end an event with the LF
// that follows). The relay hands the tallies whole events, which never split a UTF-8 sequence, so
// those are decoded alone; a TextDecoder (whose ICU converter costs a few µs to set up, once per
// stream when every tally made one) is made only for bytes of any split, and from then on every
// piece goes through it, so a sequence it holds is kept.

/** Where the text goes: the tally's SSE parser. */
export interface TextSink {
  feed(text: string): void;
}

export class TallyText {
  private decoder: TextDecoder | undefined = undefined;
  /** The last character fed was a CR, which may still end an event. */
  heldCr = false;

  constructor(private readonly sink: TextSink) {}

  /** Bytes of any split: a UTF-8 sequence may continue in the next piece. */
  feedBytes(bytes: Uint8Array): void {
    this.decoder ??= new TextDecoder('utf-8');
    this.feed(this.decoder.decode(bytes, { stream: true }));
  }

  /** Whole events' bytes. */
  feedWhole(bytes: Buffer): void {
    this.feed(this.decoder === undefined ? bytes.toString('utf8') : this.decoder.decode(bytes, { stream: true }));
  }

  /** Text already decoded. */
  feed(text: string): void {
    if (text.length === 0) return;
    this.heldCr = text.charCodeAt(text.length - 1) === 13;
    this.sink.feed(text);
  }

  /** At the stream's end: what the decoder still holds (nothing when none was made). */
  feedRest(): void {
    if (this.decoder !== undefined) this.feed(this.decoder.decode());
  }
}
