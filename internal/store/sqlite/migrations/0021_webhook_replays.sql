-- A replayed webhook costs its dedupe key, not its body (docs/webhooks.md).
-- webhook serve stores each verified delivery under a dedupe key: the
-- provider's delivery id where it signs one (Standard Webhooks'
-- webhook-id), else a SHA-256 digest of what the provider signed (the body;
-- for Twilio the URL it called and the body). The unique index below lets
-- one copy in per (provider, identity, dedupe_key); the store's insert skips
-- the others (ON CONFLICT DO NOTHING) and counts them, so a body signed once
-- and replayed without end is kept once.
--
-- Rows stored before this migration keep dedupe_key '' and stay out of the
-- partial index: a store may hold the same delivery several times already
-- (nothing refused it), and an index over those rows would fail to build.
-- Their keys are not filled in from their bodies: SQLite has no SHA-256 in
-- SQL, and the copies are evidence of what arrived, not to be deleted by an
-- upgrade. So a replay of a delivery received before the upgrade is stored
-- once more, and then deduplicated like any other. msgq webhook replay (an
-- operator re-feeding a file) stores with '' too: it is not refused.
ALTER TABLE webhook_events ADD COLUMN dedupe_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX webhook_events_dedupe ON webhook_events (provider, identity, dedupe_key) WHERE dedupe_key <> '';
