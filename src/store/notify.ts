// The Postgres NOTIFY channel every instance listens on (ledger/recalls.ts owns the listener):
// lease recalls, key changes and operator switches. Here, below both the ledger and the
// deployment switches, so each can send on it without importing the other.

const BUS_CHANNEL = 'inkgate_recall';

/** The channel name carries the schema, so test schemas (and deployments sharing a server) never hear each other. */
export const busChannel = (schema: string): string => `${BUS_CHANNEL}_${schema}`;

/** The channel as an SQL expression for the session's own schema. */
export const BUS_CHANNEL_SQL = `'${BUS_CHANNEL}_' || current_schema()`;

/** A NOTIFY telling every instance an operator switch changed (decoded by ledger/recalls.ts as why: 'switch'). */
export const SWITCH_NOTIFY_SQL = `pg_notify(${BUS_CHANNEL_SQL}, '{"w":"switch"}')`;
