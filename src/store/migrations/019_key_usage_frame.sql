-- How a key's streamed text replies carry the closing usage frame (ink charged, USD, request id):
-- 'event' is the service's own named SSE event (`event: service.usage`), 'comment' the same
-- payload as an SSE comment line, 'none' no frame at all. Clients that check every event type
-- against the vendor's list (the Vercel AI SDK's Anthropic provider) fail on the named event, so
-- their keys are set to 'comment' or 'none'. A constant default: adding the column rewrites no row.
ALTER TABLE api_keys ADD COLUMN usage_frame text NOT NULL DEFAULT 'event'
  CHECK (usage_frame IN ('event', 'comment', 'none'));
