// Starts OpenTelemetry traces when an endpoint is configured. The SDK is imported here, on demand
// (otel-tracing.ts): a gateway with traces off never loads it. What the rest of the gateway sees
// is in hooks.ts.
import type { Config } from '../config/config.js';
import type { Tracing, TracingLog } from './hooks.js';

/** The tracer when `cfg.endpoint` is set, else undefined. */
export async function startTracing(cfg: Config['tracing'], log: TracingLog): Promise<Tracing | undefined> {
  if (cfg.endpoint === null) return undefined;
  const { OtelTracing } = await import('./otel-tracing.js');
  return new OtelTracing(cfg, cfg.endpoint, log);
}
