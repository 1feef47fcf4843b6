// A stand-in for the text lanes' ledger (text-billing.ts) that writes nothing, for the bench's
// "billing off" runs only: it measures what billing costs by taking it away. It is reachable only
// through `GatewayOptions.unbilled` (code, never configuration), so no deployment can run free.
import type { Hold, ReserveInput, ResolveResult } from './ledger.js';
import type { TextMoves } from './text-billing.js';

export class UnbilledLedger implements TextMoves {
  async reserve(input: ReserveInput): Promise<Hold> {
    return { requestId: input.requestId, holdInk: input.holdInk, grantInk: input.holdInk, paygInk: 0 };
  }

  async settle(_requestId: string, chargeInk: number): Promise<ResolveResult> {
    return { resolved: true, chargedInk: chargeInk, releasedInk: 0, expiredInk: 0 };
  }

  async release(): Promise<ResolveResult> {
    return { resolved: true, chargedInk: 0, releasedInk: 0, expiredInk: 0 };
  }

  async markUsageUnknownEventually(): Promise<void> {}

  async setVendorRequestId(): Promise<void> {}
}
