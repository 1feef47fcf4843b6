// The per-request metrics, on the hot path: inkgate_http_requests_total and
// inkgate_http_request_duration_seconds by route template and status class. Every (route, status
// class) pair is a cell made once (the first time it is seen; routes are a fixed table), and one
// observation is an index, a bucket search over a dozen bounds and three additions: no labels
// object, no hash string, nothing allocated per request. prom-client's own Histogram builds a
// label hash per observation; these cells are exposed to its registry as a custom metric instead.

/** What prom-client's registry reads from a metric (its own interfaces for this are not exported). */
export interface CustomMetric {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly aggregator: 'sum';
  get(): {
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: Array<{ metricName?: string; labels: Record<string, string | number>; value: number }>;
  };
}

/** Seconds. From a cached 404 to a long completion stream. */
export const DURATION_BUCKETS_S: readonly number[] = Object.freeze([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]);
/**
 * `client_closed`: the client went away before its answer was complete (status 499 in the access
 * log), counted apart so that no client can move the 5xx (or 4xx) rate by hanging up.
 */
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx', 'client_closed'] as const;
const CLIENT_CLOSED_CLASS = 5;
/**
 * The status the access log and the metrics give a request whose client went away before its
 * answer was complete (nginx's 499): the client's doing, so never counted as a server failure.
 */
export const CLIENT_CLOSED_STATUS = 499;
/** The route label of a request no route took (404, API closed, draining). */
export const UNMATCHED_ROUTE = 'unmatched';
/**
 * The route label of a request refused for its HTTP framing before any route saw it: a head the
 * engine cannot parse or that came too slowly (408), a version other than 1.0 and 1.1, a repeated
 * Host or Content-Length, CONNECT, an unknown Expect, a chunked body on uWS.
 */
export const FRAMING_ROUTE = 'framing';
/** Methods kept as a label on the console and media routes; any other is `other` (labels stay bounded). */
const NAMED_METHODS = new Set(['GET', 'HEAD', 'POST']);

/** The method label: `any` where the method may be anything a client sent, else the method (bounded). */
function methodLabel(method: string, route: string): string {
  if (route === UNMATCHED_ROUTE || route === FRAMING_ROUTE) return 'any';
  if (route.charCodeAt(0) === 0x2f) return method; // a route template: its own method
  return NAMED_METHODS.has(method) ? method : 'other';
}

interface Cell {
  readonly labels: Readonly<{ route: string; method: string; status_class: string }>;
  readonly buckets: Float64Array;
  count: number;
  sum: number;
}

export class RequestMetrics {
  /** Per route key ("GET /v1/models"): one cell per status class, made on first use. */
  private readonly byRoute = new Map<string, Array<Cell | undefined>>();
  private readonly bounds: Float64Array = Float64Array.from(DURATION_BUCKETS_S);

  /** One finished request. `routeKey` is the route's method and template, never the raw path. */
  observe(method: string, route: string, status: number, seconds: number): void {
    const label = methodLabel(method, route);
    const key = label + ' ' + route;
    let row = this.byRoute.get(key);
    if (row === undefined) {
      row = new Array<Cell | undefined>(STATUS_CLASSES.length).fill(undefined);
      this.byRoute.set(key, row);
    }
    let cls = status === CLIENT_CLOSED_STATUS ? CLIENT_CLOSED_CLASS : Math.floor(status / 100) - 1;
    if (cls < 0 || cls > CLIENT_CLOSED_CLASS) cls = 4; // a request that never got a status counts as a server failure
    let cell = row[cls];
    if (cell === undefined) {
      cell = {
        labels: Object.freeze({ route, method: label, status_class: STATUS_CLASSES[cls]! }),
        buckets: new Float64Array(this.bounds.length),
        count: 0,
        sum: 0,
      };
      row[cls] = cell;
    }
    cell.count++;
    cell.sum += seconds;
    const b = this.bounds;
    for (let i = 0; i < b.length; i++) {
      if (seconds <= b[i]!) {
        cell.buckets[i]!++;
        break;
      }
    }
  }

  private cells(): Cell[] {
    const out: Cell[] = [];
    for (const row of this.byRoute.values()) for (const c of row) if (c !== undefined) out.push(c);
    return out;
  }

  /** The two metric objects prom-client's registry renders (duck-typed Metric: name, help, type, get). */
  promMetrics(): CustomMetric[] {
    const total: CustomMetric = {
      name: 'inkgate_http_requests_total',
      help: 'Requests answered on the public port, by route template, method and status class.',
      type: 'counter',
      aggregator: 'sum',
      get: () => ({ ...total, values: this.cells().map((c) => ({ labels: c.labels, value: c.count })) }),
    };
    const duration: CustomMetric = {
      name: 'inkgate_http_request_duration_seconds',
      help: 'Time from the request line to the end of the answer (a stream: its last byte), by route template, method and status class.',
      type: 'histogram',
      aggregator: 'sum',
      get: () => {
        const values: ReturnType<CustomMetric['get']>['values'] = [];
        for (const c of this.cells()) {
          let acc = 0;
          for (let i = 0; i < this.bounds.length; i++) {
            acc += c.buckets[i]!;
            values.push({ metricName: 'inkgate_http_request_duration_seconds_bucket', labels: { ...c.labels, le: this.bounds[i]! }, value: acc });
          }
          values.push({ metricName: 'inkgate_http_request_duration_seconds_bucket', labels: { ...c.labels, le: '+Inf' }, value: c.count });
          values.push({ metricName: 'inkgate_http_request_duration_seconds_sum', labels: c.labels, value: c.sum });
          values.push({ metricName: 'inkgate_http_request_duration_seconds_count', labels: c.labels, value: c.count });
        }
        return { ...duration, values };
      },
    };
    return [total, duration];
  }
}
