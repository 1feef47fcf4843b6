// One deployment's health: ready, cooling down, or half-open (one trial request allowed). The
// clock is injected (tests drive it); the state is this instance's own, shared with no other
// (docs/vendor-pools.md says why that is enough).
//
//   ready --(Retry-After on 429/529/503)--> cooling until then
//   ready --(cooldownFailures refused connections or 5xx in a row)--> cooling for cooldownMinMs
//   cooling --(time passed)--> half_open: one request is let through
//   half_open --(it is answered)--> ready          half_open --(it fails)--> cooling, back-off doubled

export type DeploymentState = 'ready' | 'cooling' | 'half_open';
export type CooldownReason = 'retry_after' | 'failures';

export interface CooldownSettings {
  /** Failures in a row that start a cooldown. */
  readonly failures: number;
  readonly minMs: number;
  readonly maxMs: number;
}

export class DeploymentHealth {
  state: DeploymentState = 'ready';
  /** While cooling: the clock time it may be tried again. */
  reopensAtMs = 0;
  /** Failures in a row (reset by an answer). */
  failures = 0;
  /** Why the last cooldown began. */
  reason: CooldownReason | undefined;
  private backoffMs = 0;
  /** Half-open: its one trial request is out. */
  private trialOut = false;

  constructor(private readonly settings: CooldownSettings) {}

  /** May a request be sent now? A cooldown that ran out turns half-open here. */
  usable(nowMs: number): boolean {
    if (this.state === 'ready') return true;
    if (this.state === 'cooling') {
      if (nowMs < this.reopensAtMs) return false;
      this.state = 'half_open';
      this.trialOut = false;
    }
    return !this.trialOut;
  }

  /** A request is sent to it (a half-open deployment's one trial). */
  started(): void {
    if (this.state === 'half_open') this.trialOut = true;
  }

  /** The deployment answered (any status that is not a failure). True when it left a cooldown. */
  answered(): boolean {
    // An answer to a request sent before a cooldown began does not end that cooldown.
    if (this.state === 'cooling') return false;
    this.failures = 0;
    if (this.state === 'ready') return false;
    this.state = 'ready';
    this.backoffMs = 0;
    this.trialOut = false;
    return true;
  }

  /** A refused connection or a 5xx. True when it entered a cooldown. */
  failed(nowMs: number): boolean {
    this.failures++;
    if (this.state === 'cooling') return false;
    if (this.state === 'half_open') {
      this.backoffMs = Math.min(Math.max(this.backoffMs * 2, this.settings.minMs), this.settings.maxMs);
      return this.cool(nowMs + this.backoffMs, 'failures');
    }
    if (this.failures < this.settings.failures) return false;
    this.backoffMs = this.settings.minMs;
    return this.cool(nowMs + this.backoffMs, 'failures');
  }

  /** The vendor said when to come back (429, 529 or 503 with Retry-After). True when it entered a cooldown. */
  retryAfter(nowMs: number, waitMs: number): boolean {
    const until = nowMs + waitMs;
    if (this.state === 'cooling') {
      this.reopensAtMs = Math.max(this.reopensAtMs, until);
      return false;
    }
    return this.cool(until, 'retry_after');
  }

  private cool(untilMs: number, reason: CooldownReason): true {
    this.state = 'cooling';
    this.reopensAtMs = untilMs;
    this.reason = reason;
    this.trialOut = false;
    return true;
  }
}
