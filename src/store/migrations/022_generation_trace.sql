-- A generation's submit, as a W3C traceparent (version 00: trace id, span id, flags), so that the
-- job spans that poll and finish it (src/tracing) can link to the request that bought it, on
-- whichever instance claims the row. Null when the submit was not traced (traces off, or not
-- sampled). Ids only: a traceparent carries nothing of the request.
ALTER TABLE generations ADD COLUMN IF NOT EXISTS trace_parent text
  CONSTRAINT generations_trace_parent_check CHECK (trace_parent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
