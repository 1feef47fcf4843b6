// A process the bench measures, as the parent sees it: a child it started (simulators, a gateway,
// the plain proxy, an embedded Postgres) or the Postgres server read from /proc.
import type { LedgerAudit, ProcessSnapshot } from './child.js';

export interface BenchProcess {
  readonly name: string;
  readonly pid: number;
  /** Processes it started itself (the embedded postmaster), reported so callers can check they end. */
  readonly extraPids: readonly number[];
  stats(op: 'mark' | 'read'): Promise<ProcessSnapshot>;
  /** A billing gateway's ledger after the load (null for any other process). */
  audit(): Promise<LedgerAudit | null>;
  /** A CPU profile of this process: started, then stopped and written to `file` (child processes only). */
  profile?(op: 'start' | 'stop', file?: string): Promise<void>;
  stop(): Promise<void>;
}
