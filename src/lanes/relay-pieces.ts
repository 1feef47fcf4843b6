// The small pieces a text stream's relay is made of, each one concern, composed in one place
// (text-proxy.ts, createRelay). Per stream, one object each, made when the stream starts: a chunk
// allocates nothing in them.
import type { Dispatcher } from 'undici';
import type { TextBilling } from '../ledger/text-billing.js';
import type { HttpContext } from '../server/http-context.js';
import type { StreamTally } from './text-lane.js';
import { storableId } from './vendor-answer.js';

type VendorBody = Dispatcher.ResponseData['body'];

/**
 * Backpressure: writes to the client, and when the client's socket is full pauses the vendor's
 * body until it drains. A client that went away is not written to, but the vendor is read on to
 * its receipt (the charge is what it reports).
 */
export class ClientWriter {
  private waiting = false;
  private readonly resume: () => void;

  constructor(
    private readonly ctx: HttpContext,
    private readonly body: VendorBody,
  ) {
    this.resume = () => {
      this.waiting = false;
      body.resume();
    };
  }

  write(out: Buffer): void {
    if (!this.ctx.aborted && !this.ctx.write(out) && !this.waiting) {
      this.waiting = true;
      this.body.pause();
      void this.ctx.waitWritable().then(this.resume);
    }
  }
}

/**
 * The vendor's id goes on the request record as soon as the stream names it (once, not awaited):
 * a crash mid-stream then leaves a hold that reconciliation can match to the vendor's record.
 */
export class VendorIdOnce {
  private recorded = false;

  constructor(
    private readonly billing: TextBilling,
    private readonly ctx: HttpContext,
  ) {}

  look(tally: StreamTally): void {
    if (this.recorded) return;
    const vendorId = storableId(tally.vendorRequestId());
    if (vendorId === undefined) return;
    this.recorded = true;
    this.billing.noteVendorId(this.ctx, vendorId);
  }
}

/** The first byte relayed to the client: the time-to-first-token metric and the trace's mark, once. */
export class FirstByte {
  private seen = false;

  constructor(private readonly mark: () => void) {}

  relayed(): void {
    if (this.seen) return;
    this.seen = true;
    this.mark();
  }
}
