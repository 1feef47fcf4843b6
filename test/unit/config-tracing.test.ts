// The trace settings come from the standard OpenTelemetry variables (src/config, the one reader of
// the environment): the endpoint derived as the specification says, the sampler and its argument
// checked at start-up, off when no endpoint is set.
import t from 'tap';
import { knownEnvironmentVariables, loadConfig } from '../../src/config/config.js';

t.test('off by default', async (t) => {
  const c = loadConfig({});
  t.equal(c.tracing.endpoint, null);
  t.equal(c.tracing.serviceName, 'inkgate');
  t.equal(c.tracing.sampler, 'parentbased_always_on');
  t.equal(c.tracing.samplerArg, null);
});

t.test('the endpoint: the traces variable as written, else the general one with /v1/traces', async (t) => {
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }).tracing.endpoint, 'http://127.0.0.1:4318/v1/traces');
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/otlp/' }).tracing.endpoint, 'http://collector:4318/otlp/v1/traces');
  t.equal(
    loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b:4318/custom/path' }).tracing.endpoint,
    'https://b:4318/custom/path',
    'the signal-specific variable wins and is not appended to',
  );
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: '' }).tracing.endpoint, null, 'an empty variable is unset');
  t.throws(() => loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://collector:4317' }), /tracing\/endpoint/, 'OTLP over HTTP only');
});

t.test('service name, sampler and its argument', async (t) => {
  const c = loadConfig({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318',
    OTEL_SERVICE_NAME: 'gateway-eu',
    OTEL_TRACES_SAMPLER: 'ParentBased_TraceIdRatio',
    OTEL_TRACES_SAMPLER_ARG: '0.01',
  });
  t.equal(c.tracing.serviceName, 'gateway-eu');
  t.equal(c.tracing.sampler, 'parentbased_traceidratio', 'sampler names are case-insensitive');
  t.equal(c.tracing.samplerArg, 0.01);
  t.throws(() => loadConfig({ OTEL_TRACES_SAMPLER: 'jaeger_remote' }), /tracing\/sampler/, 'an unsupported sampler is a start-up error');
  t.throws(() => loadConfig({ OTEL_TRACES_SAMPLER_ARG: 'half' }), /OTEL_TRACES_SAMPLER_ARG must be a number/);
  t.throws(() => loadConfig({ OTEL_TRACES_SAMPLER_ARG: '1.5' }), /tracing\/samplerArg/, 'a ratio above 1 is refused');
});

t.test('the variables are listed among those the configuration reads', async (t) => {
  const known = knownEnvironmentVariables();
  for (const v of [
    'OTEL_EXPORTER_OTLP_ENDPOINT',
    'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    'OTEL_SERVICE_NAME',
    'OTEL_TRACES_SAMPLER',
    'OTEL_TRACES_SAMPLER_ARG',
  ]) {
    t.ok(known.includes(v), v);
  }
});
