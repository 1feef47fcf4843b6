// A test OTLP/HTTP trace receiver: a real node:http server on 127.0.0.1:0 that takes what the
// official exporter (@opentelemetry/exporter-trace-otlp-http, JSON encoding) posts to /v1/traces,
// keeps every raw body (to search for what must never be exported) and decodes the spans.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Test } from 'tap';

export interface ReceivedSpan {
  readonly name: string;
  readonly kind: number;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly attrs: Readonly<Record<string, unknown>>;
  readonly links: ReadonlyArray<{ traceId: string; spanId: string }>;
  readonly events: readonly string[];
  /** 0 unset, 1 ok, 2 error. */
  readonly status: number;
  readonly resource: Readonly<Record<string, unknown>>;
}

/** OTLP SpanKind numbers (the JSON encoding's). */
export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

export interface OtlpReceiver {
  /** The full traces URL (http://127.0.0.1:port/v1/traces). */
  readonly url: string;
  /** Every body received, as text. */
  readonly bodies: string[];
  spans(): ReceivedSpan[];
  /**
   * Flushes the gateway's tracer until `found` returns a value (a span ends just after its answer
   * went out, so the first flush can come before it), at most `rounds` times.
   */
  until<T>(flush: () => Promise<void>, found: (spans: ReceivedSpan[]) => T | undefined, rounds?: number): Promise<T>;
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: number | string; doubleValue?: number; boolValue?: boolean; arrayValue?: { values?: AnyValue[] } };
type KeyValue = { key: string; value: AnyValue };

function anyValue(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(anyValue);
  return undefined;
}

const attrsOf = (list: KeyValue[] | undefined): Record<string, unknown> => Object.fromEntries((list ?? []).map((a) => [a.key, anyValue(a.value)]));

/** The spans of one ExportTraceServiceRequest in its JSON encoding (ids in hex). */
function decode(body: string): ReceivedSpan[] {
  const req = JSON.parse(body) as {
    resourceSpans?: Array<{
      resource?: { attributes?: KeyValue[] };
      scopeSpans?: Array<{ spans?: Array<Record<string, any>> }>;
    }>;
  };
  const out: ReceivedSpan[] = [];
  for (const rs of req.resourceSpans ?? []) {
    const resource = attrsOf(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          name: s.name,
          kind: s.kind,
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? '',
          attrs: attrsOf(s.attributes),
          links: (s.links ?? []).map((l: { traceId: string; spanId: string }) => ({ traceId: l.traceId, spanId: l.spanId })),
          events: (s.events ?? []).map((e: { name: string }) => e.name),
          status: s.status?.code ?? 0,
          resource,
        });
      }
    }
  }
  return out;
}

export async function startOtlpReceiver(t: Test): Promise<OtlpReceiver> {
  const bodies: string[] = [];
  let decoded: ReceivedSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).startsWith('application/json')) {
        res.writeHead(404).end();
        return;
      }
      // Kept before the answer: the exporter's flush resolves only once it is answered.
      bodies.push(text);
      decoded = decoded.concat(decode(text));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  t.teardown(close);
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies,
    spans: () => decoded,
    async until(flush, found, rounds = 200) {
      for (let i = 0; i < rounds; i++) {
        await flush();
        const v = found(decoded);
        if (v !== undefined) return v;
        await nextTurn();
      }
      throw new Error(
        `the receiver did not get the spans looked for after ${rounds} flushes (${decoded.length} spans: ${decoded.map((s) => s.name).join(', ')})`,
      );
    },
    close,
  };
}
