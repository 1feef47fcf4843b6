// Every log line's `msg` is one of these stable event ids (`area.event_name`), never prose: an
// operator alerts and counts on the id, and reads the why in the line's fields. Each id has one
// level, chosen by what the event means (docs/operations.md#logs mirrors this table; a unit test
// checks both, and that every id written anywhere in src/ is here).
//   debug  detail for a developer      info   normal operation worth a line (a lease recovered)
//   warn   degraded, recovered by itself or retried     error  failed: money or data waits for an operator
//   fatal  an invariant broken or a start failed: the process stops

export type EventLevel = 'debug' | 'info' | 'warn' | 'error' | 'fatal';

export interface LogEventSpec {
  readonly level: EventLevel;
  /** One line: what happened, for the operations doc. */
  readonly meaning: string;
}

const spec = (level: EventLevel, meaning: string): LogEventSpec => Object.freeze({ level, meaning });

export const LOG_EVENTS = Object.freeze({
  // The process: start, announce, stop.
  'gateway.listening': spec('info', 'The public port serves (`url`).'),
  'gateway.start_failed': spec('fatal', 'A start step failed (`step`, `err`); what had `started` is stopped and the process exits 1.'),
  'gateway.shutting_down': spec('info', 'A signal (`signal`) began the drain and stop.'),
  'gateway.shutdown_step_failed': spec('warn', 'One stop step failed or overran (`step`, `err`); the others still run.'),
  'demo.vendors_started': spec('info', 'The demo started the vendor simulators (their base URLs as fields).'),
  'store.opened': spec('info', 'The database is ready: `kind` external (DATABASE_URL) or embedded (in `dir`).'),
  'store.embedded_initialising': spec('info', 'The embedded PostgreSQL initialises a fresh data directory (`dir`).'),
  'store.embedded_orphan_stopped': spec('info', 'A postmaster left by a killed run is stopped before this start takes its data directory (`pid`, `dir`).'),
  'store.embedded_binaries_placed': spec(
    'info',
    'Run as root, the `postgres` user cannot run the binaries where they are (`from`): linked or copied to `dir`, once per version.',
  ),
  'store.embedded_data_placed': spec(
    'info',
    'Run as root, the `postgres` user cannot reach the data dir (`dataDir`): the database lives in `dir`, `<dataDir>/pg` links to it.',
  ),
  'limits.backend': spec('info', 'The rate limiter in use: `kind` redis (shared by every instance) or memory (one instance only).'),
  'limits.redis_unavailable': spec('warn', 'Redis failed (`err`); limited routes answer 503 until it is back.'),
  'limits.not_ready': spec('warn', 'The rate limiter was not ready in time at start; limited routes answer 503 until it is.'),
  // The public server and the admin listener.
  'http.engine_chosen': spec('info', 'The HTTP engine serving (`engine`) and why (`reason`).'),
  'http.request': spec('info', 'One finished request on the public port: the access log.'),
  'http.unhandled_error': spec('error', 'A route threw an unexpected error (`path`, `err`); the client got 500 internal_error.'),
  'http.error_answer_failed': spec('error', 'The error answer itself could not be sent (`err`).'),
  'http.drain_timed_out': spec('warn', 'At shutdown, requests were still running when the drain period ended.'),
  'ops.admin_listening': spec('info', 'The admin listener (/metrics, /healthz, /readyz) serves (`url`).'),
  'ops.draining': spec('info', 'Readiness fails while the balancer notices (`drain_delay_ms`); requests are still admitted.'),
  'ops.metrics_scrape_failed': spec('error', 'A /metrics scrape failed (`err`).'),
  'tracing.started': spec('info', 'Traces are on: spans go to `endpoint` (OTLP/HTTP), sampled by `sampler` (`sampler_arg`) as `service_name`.'),
  'tracing.export_failed': spec(
    'warn',
    'A batch of spans could not be exported (`endpoint`, `spans`, `failures`, `err`); they are dropped, requests are not affected.',
  ),
  // The text lanes: a hold a request could not end.
  'text.hold_left_open': spec('warn', 'A text request ended without a usable charge; its hold stays open for reconciliation (`reason`, `vendor_request_id`).'),
  'text.settle_failed': spec('error', 'A known charge could not be written (`charge_ink`, `usage`, `err`); the hold stays open for reconciliation.'),
  'text.ledger_move_failed': spec('error', 'A ledger move on a failure path (`move`) failed (`err`); the hold stays open for reconciliation.'),
  // Vendor pools (src/vendors/pool): a deployment taken out of and back into the choice.
  'vendor.deployment_cooling': spec(
    'warn',
    'A vendor deployment is skipped for a while (`vendor`, `deployment`, `reason`, `reopens_in_ms`); requests go to the others.',
  ),
  'vendor.deployment_recovered': spec('info', 'A vendor deployment answered its half-open trial and takes requests again (`vendor`, `deployment`).'),
  // Generations (video, images) and the job runner.
  'generations.url_refused': spec('info', "A client's URL was refused at submit (`param`, `host`, `detail`); the client got invalid_url."),
  'images.reference_refused': spec('info', 'A reference image could not be fetched when the job ran (`param`, `host`, `detail`).'),
  'images.queue_failed': spec('warn', 'An accepted image request could not be queued (`err`).'),
  'images.vendor_failed': spec('warn', 'The image vendor call failed (`call`, `err`); retried or failed and refunded.'),
  'images.persist_failed': spec('warn', 'An image result could not be stored (`err`); retried or failed and refunded.'),
  'images.refund_not_open': spec('error', "A failed image generation's hold was not open to refund (`reason`)."),
  'images.settle_not_open': spec('error', "A succeeded image generation's hold was not open to settle (`reason`)."),
  'video.vendor_create_failed': spec('warn', 'The vendor did not create the video task (`err`); the generation fails and is refunded.'),
  'video.task_orphaned': spec('warn', 'A vendor task was created but its generation had moved on (`task`, `deployment`); the task is left unused.'),
  'video.deployment_unknown': spec(
    'warn',
    'The vendor deployment that created a task (`deployment`) is no longer configured; the generation fails and is refunded.',
  ),
  'video.void_failed': spec('warn', 'The hold of a submit that failed could not be voided (`err`); recovered later.'),
  'video.release_not_open': spec('error', "A failed submit's hold was not open to release (`reason`)."),
  'video.result_fetch_refused': spec('warn', "The vendor's result URL was refused (`host`, `detail`)."),
  'video.persist_failed': spec('warn', 'A video result could not be downloaded or stored (`attempt`, `err`); retried, then failed and refunded.'),
  'video.price_failed': spec('error', "The row's price set no longer prices the clip (`err`); the hold is charged, never more."),
  'video.refund_not_open': spec('error', "A failed video generation's hold was not open to refund (`reason`)."),
  'video.settle_not_open': spec('error', "A succeeded video generation's hold was not open to settle (`reason`)."),
  'jobs.claim_failed': spec('warn', 'The job runner could not claim due rows (`err`); it tries again on its next tick.'),
  'jobs.row_failed': spec('warn', 'Working one row failed (`state`, `err`); the row is claimed again once its lease lapses.'),
  'jobs.sweep_failed': spec('warn', 'A retention sweep failed (`err`); the next one retries.'),
  'media.retention_delete_failed': spec('warn', "An expired generation's media could not be deleted (`err`); the next sweep retries."),
  // The ledger (src/ledger): the escrow, its journal, the fail-stop and the drift gauge.
  'ledger.fail_stop': spec('fatal', 'A money rule broke (`err`, `figures`): admissions stopped, the journal written, the process exits.'),
  'ledger.assertion_after_fail_stop': spec('fatal', 'Another money rule broke while the fail-stop was already under way.'),
  'ledger.assertion_failed': spec('fatal', 'A money rule broke with no fail-stop handler: money moves stopped.'),
  'ledger.fail_stop_halt_failed': spec('error', "The fail-stop's halt failed (`err`); the process exits all the same."),
  'ledger.halt_unwritten': spec('error', 'At a fail-stop, journal records (`records`) were not written; left for lease recovery.'),
  'ledger.close_unwritten': spec('error', 'At shutdown, journal records (`records`) were not written; left for lease recovery.'),
  'ledger.flush_retried': spec(
    'warn',
    'A journal write failed (`records`, `failures`, `err`) and is retried, the records kept: a lock wait or a slow store, once.',
  ),
  'ledger.flush_failed': spec(
    'error',
    'The journal could not be written five times in a row, and every hundredth after (`records`, `failures`, `err`); still retried, the records kept.',
  ),
  'ledger.late_flush': spec('warn', 'A journal record reached the store after its lease was recovered; recorded on the late path.'),
  'ledger.end_not_yet_written': spec('warn', 'A request end is not in the store yet; it stays queued and is written when the store answers.'),
  'ledger.charge_above_hold': spec('warn', 'A charge above the hold was asked (`chargeInk`, `holdInk`); the hold is charged, never more.'),
  'ledger.usage_unknown_not_open': spec('warn', 'Marking usage unknown found no open hold.'),
  'ledger.usage_unknown_gave_up': spec('error', 'Marking usage unknown failed after every retry; the hold stays open for reconciliation.'),
  'ledger.reserve_abandoned': spec('info', 'A reserve whose answer was lost was voided afterwards (`outcome`).'),
  'ledger.reserve_abandon_failed': spec('error', 'Voiding an abandoned reserve failed after every retry; reconciliation finds the hold.'),
  'ledger.lease_recovered': spec('info', 'An expired lease was recovered (`why`, `holds_kept`).'),
  'ledger.lease_recover_failed': spec('warn', 'Recovering an expired lease failed (`err`); the next sweep retries.'),
  'ledger.lease_return_refused': spec('warn', 'The store refused to take a lease back (`result`); it expires and is recovered.'),
  'ledger.lease_return_failed': spec('warn', 'Returning a lease failed (`err`); it expires and is recovered.'),
  'ledger.close_leases_left': spec('warn', 'At shutdown, leases (`leases`) could not be returned; recovered when they expire.'),
  'ledger.heartbeat_failed': spec('warn', "The instance's lease heartbeat failed (`err`); retried on the next beat."),
  'ledger.instance_superseded': spec('error', 'Another start took this instance id: its leases are recovered there, none taken here.'),
  'ledger.recall_bus_error': spec('warn', 'The lease recall bus failed (`err`); recalls wait for the next poll.'),
  'ledger.recall_publish_failed': spec('warn', 'A lease recall could not be published (`err`); other instances see it on their next poll.'),
  'ledger.drift': spec('error', 'Account balances disagree with their ledger entries (`accounts`, `sample`): run `inkgate ledger check`.'),
  'ledger.drift_check_failed': spec('warn', 'The drift check could not run (`err`); the next one retries.'),
} as const satisfies Record<string, LogEventSpec>);

/** A stable event id: a line's `msg`. */
export type LogEvent = keyof typeof LOG_EVENTS;

/** The level an event is written at, or undefined for an id not in the table. */
export function levelOf(event: LogEvent): EventLevel;
export function levelOf(event: string): EventLevel | undefined;
export function levelOf(event: string): EventLevel | undefined {
  return Object.hasOwn(LOG_EVENTS, event) ? LOG_EVENTS[event as LogEvent].level : undefined;
}
