// The text lanes' ledger seen as the moves a text request makes: the escrow (escrow.ts) serves
// them, and so does the bench's no-op stand-in (unbilled.ts).
import type { Ledger } from './ledger.js';

/** The moves a text request makes. */
export type TextBilling = Pick<Ledger, 'reserve' | 'settle' | 'release' | 'markUsageUnknownEventually' | 'setVendorRequestId'>;
