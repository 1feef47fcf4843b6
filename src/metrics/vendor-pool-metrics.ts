// Per-deployment figures of the vendor pools (src/vendors/pool), read when Prometheus scrapes: the
// pools count in plain fields on the hot path, nothing here runs per request. Labels: vendor and
// deployment names from the configuration, reasons from fixed lists.
import { Counter, Gauge, type Registry } from 'prom-client';

/** What the metrics read of a pool; declared here so metrics import no vendor code. */
export interface PoolFigures {
  readonly vendor: string;
  readonly members: ReadonlyArray<{
    readonly name: string;
    readonly inFlight: number;
    readonly requests: number;
    readonly moved: Readonly<Record<string, number>>;
    readonly cooldowns: Readonly<Record<string, number>>;
    readonly health: { readonly state: string };
  }>;
}

export function registerPoolMetrics(registry: Registry, pools: () => readonly PoolFigures[]): void {
  const each = (visit: (vendor: string, member: PoolFigures['members'][number]) => void) => {
    for (const p of pools()) for (const m of p.members) visit(p.vendor, m);
  };
  new Counter({
    name: 'inkgate_vendor_requests_total',
    help: 'Tries sent to each vendor deployment (a request moved to another deployment counts once on each).',
    labelNames: ['vendor', 'deployment'],
    registers: [registry],
    collect() {
      this.reset();
      each((vendor, m) => this.inc({ vendor, deployment: m.name }, m.requests));
    },
  });
  new Counter({
    name: 'inkgate_vendor_tries_moved_total',
    help: 'Tries a deployment refused before starting work, by why (connect, status_429, status_503, status_529): moved to another deployment, or the last one.',
    labelNames: ['vendor', 'deployment', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      each((vendor, member) => {
        for (const [reason, n] of Object.entries(member.moved)) this.inc({ vendor, deployment: member.name, reason }, n);
      });
    },
  });
  new Counter({
    name: 'inkgate_vendor_cooldowns_total',
    help: 'Cooldowns a deployment entered, by why (retry_after: the vendor said when; failures: refused or failed in a row).',
    labelNames: ['vendor', 'deployment', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      each((vendor, member) => {
        for (const [reason, n] of Object.entries(member.cooldowns)) this.inc({ vendor, deployment: member.name, reason }, n);
      });
    },
  });
  new Gauge({
    name: 'inkgate_vendor_in_flight',
    help: 'Requests in flight to each deployment on this instance (a stream counts until it ends).',
    labelNames: ['vendor', 'deployment'],
    registers: [registry],
    collect() {
      this.reset();
      each((vendor, m) => this.set({ vendor, deployment: m.name }, m.inFlight));
    },
  });
  new Gauge({
    name: 'inkgate_vendor_deployment_up',
    help: '1 while a deployment takes requests on this instance (ready or half-open), 0 while it cools down.',
    labelNames: ['vendor', 'deployment'],
    registers: [registry],
    collect() {
      this.reset();
      each((vendor, m) => this.set({ vendor, deployment: m.name }, m.health.state === 'cooling' ? 0 : 1));
    },
  });
}
