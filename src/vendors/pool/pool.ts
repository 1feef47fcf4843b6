// A vendor's deployments and the choice among them. Made once at start-up: each deployment's
// client, its share of a weighted slot table, its counters. A pick draws two slots (weighted), keeps
// the usable one with fewer requests in flight per unit of weight (power of two choices: a slow
// deployment holds its requests longer and so gets fewer new ones), and allocates nothing.
// A pool of one deployment is the single vendor URL of before: it is always tried, never cooled
// down (with nowhere else to go, the vendor's own answer is passed on as it always was).
import type { VendorDeployment, VendorId } from '../../config/config.js';
import { type CooldownReason, type CooldownSettings, type DeploymentState, DeploymentHealth } from './cooldown.js';
import type { MoveReason } from './retry-rule.js';

/** At most this many deployments per vendor (the tried set is a bit mask). */
export const MAX_DEPLOYMENTS = 16;

export interface PoolMember<C> {
  readonly index: number;
  readonly name: string;
  /** host[:port] of its base URL (never the key). */
  readonly host: string;
  readonly weight: number;
  readonly maxConcurrent: number;
  /** The key's first characters, for operators telling keys apart. */
  readonly keyPrefix: string;
  readonly client: C;
  readonly health: DeploymentHealth;
  inFlight: number;
  /** Tries sent to it. */
  requests: number;
  /** Tries moved away from it, by why. */
  readonly moved: Record<MoveReason, number>;
  /** Cooldowns it entered, by why. */
  readonly cooldowns: Record<CooldownReason, number>;
}

export type PoolChange = 'cooling' | 'recovered';

export interface PoolOptions {
  readonly cooldown: CooldownSettings;
  /** Monotonic milliseconds (default performance.now). */
  readonly clock?: () => number;
  /** [0, 1) (default Math.random). */
  readonly random?: () => number;
  /** A deployment entered or left a cooldown (the gateway logs it). */
  readonly onChange?: (change: PoolChange, member: PoolMember<unknown>, vendor: VendorId) => void;
}

export interface MemberView {
  readonly name: string;
  readonly host: string;
  readonly weight: number;
  readonly state: DeploymentState;
  readonly inFlight: number;
  /** Seconds until a cooling deployment may be tried again (0 otherwise). */
  readonly reopensInS: number;
}

/** A key's first characters: enough to tell two keys apart, far too few to use. */
export function keyPrefixOf(apiKey: string): string {
  return `${apiKey.slice(0, Math.min(6, Math.floor(apiKey.length / 4)))}…`;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

export class VendorPool<C> {
  readonly members: readonly PoolMember<C>[];
  /** Member indexes, each repeated by its weight (divided by the weights' common divisor). */
  private readonly slots: Uint8Array;
  private readonly clock: () => number;
  private readonly random: () => number;

  constructor(
    readonly vendor: VendorId,
    deployments: readonly VendorDeployment[],
    makeClient: (deployment: VendorDeployment) => C,
    private readonly opts: PoolOptions,
  ) {
    if (deployments.length === 0 || deployments.length > MAX_DEPLOYMENTS) throw new Error(`a vendor pool takes 1 to ${MAX_DEPLOYMENTS} deployments`);
    this.clock = opts.clock ?? (() => performance.now());
    this.random = opts.random ?? Math.random;
    this.members = deployments.map((deployment, index) => ({
      index,
      name: deployment.name,
      host: new URL(deployment.baseUrl).host,
      weight: deployment.weight,
      maxConcurrent: deployment.maxConcurrent ?? Number.POSITIVE_INFINITY,
      keyPrefix: keyPrefixOf(deployment.apiKey),
      client: makeClient(deployment),
      health: new DeploymentHealth(opts.cooldown),
      inFlight: 0,
      requests: 0,
      moved: { connect: 0, status_429: 0, status_503: 0, status_529: 0 },
      cooldowns: { retry_after: 0, failures: 0 },
    }));
    const unit = deployments.reduce((g, d) => gcd(g, d.weight), 0);
    const slots: number[] = [];
    for (const m of this.members) for (let i = 0; i < m.weight / unit; i++) slots.push(m.index);
    this.slots = Uint8Array.from(slots);
  }

  /** The member to try next, not in `tried` (a bit per index); -1 when none is usable. */
  pick(tried: number): number {
    const members = this.members;
    if (members.length === 1) return (tried & 1) === 0 && members[0]!.inFlight < members[0]!.maxConcurrent ? 0 : -1;
    const now = this.clock();
    const slots = this.slots;
    const a = slots[Math.floor(this.random() * slots.length)]!;
    const b = slots[Math.floor(this.random() * slots.length)]!;
    const okA = this.usable(a, tried, now);
    const okB = b !== a && this.usable(b, tried, now);
    if (okA && okB) return this.lighter(a, b);
    if (okA) return a;
    if (okB) return b;
    // Both draws unusable (cooling, tried, full): the lightest of the rest, if any.
    let best = -1;
    for (let i = 0; i < members.length; i++) if (this.usable(i, tried, now) && (best < 0 || this.lighter(best, i) === i)) best = i;
    return best;
  }

  private usable(index: number, tried: number, now: number): boolean {
    const m = this.members[index]!;
    return (tried & (1 << index)) === 0 && m.inFlight < m.maxConcurrent && m.health.usable(now);
  }

  /** Fewer in flight per unit of weight; a tie keeps the first (the weighted draw). */
  private lighter(first: number, second: number): number {
    const ma = this.members[first]!;
    const mb = this.members[second]!;
    return ma.inFlight * mb.weight <= mb.inFlight * ma.weight ? first : second;
  }

  /** A try goes to member `index`: counted in flight until `end`. */
  begin(index: number): void {
    const m = this.members[index]!;
    m.inFlight++;
    m.requests++;
    m.health.started();
  }

  end(index: number): void {
    this.members[index]!.inFlight--;
  }

  /** It answered with something other than a failure (a 2xx, a 4xx). */
  answered(index: number): void {
    const m = this.members[index]!;
    if (this.members.length > 1 && m.health.answered()) this.opts.onChange?.('recovered', m, this.vendor);
  }

  /** A refused connection, a 5xx, a timeout: counts toward a cooldown. */
  failed(index: number): void {
    if (this.members.length > 1) this.cooled(index, this.members[index]!.health.failed(this.clock()));
  }

  /** 429, 529 or 503 with the vendor's Retry-After. */
  retryAfter(index: number, waitMs: number): void {
    if (this.members.length > 1) this.cooled(index, this.members[index]!.health.retryAfter(this.clock(), waitMs));
  }

  private cooled(index: number, entered: boolean): void {
    if (!entered) return;
    const m = this.members[index]!;
    m.cooldowns[m.health.reason!]++;
    this.opts.onChange?.('cooling', m, this.vendor);
  }

  /** Seconds until the soonest deployment may be tried again, at least 1 (an all-down answer's Retry-After). */
  retryAfterS(): number {
    const now = this.clock();
    let soonest = Number.POSITIVE_INFINITY;
    for (const m of this.members) soonest = Math.min(soonest, m.health.state === 'cooling' ? m.health.reopensAtMs - now : 0);
    return Math.max(1, Math.ceil(soonest / 1000));
  }

  /** The member of that name (a video task's polling stays with the deployment that created it). */
  byName(name: string): PoolMember<C> | undefined {
    return this.members.find((m) => m.name === name);
  }

  /** Each deployment as operators see it (/readyz, `inkgate vendor list`). */
  view(): MemberView[] {
    const now = this.clock();
    return this.members.map((member) => {
      // Reading the state turns a cooldown that ran out half-open, as the next pick would.
      member.health.usable(now);
      const h = member.health;
      return {
        name: member.name,
        host: member.host,
        weight: member.weight,
        state: h.state,
        inFlight: member.inFlight,
        reopensInS: h.state === 'cooling' ? Math.max(0, Math.ceil((h.reopensAtMs - now) / 1000)) : 0,
      };
    });
  }
}
