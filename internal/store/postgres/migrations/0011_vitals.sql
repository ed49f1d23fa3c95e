-- Vital signs (internal/store/vitals.go): what stats and health read besides 0003's.

-- Counts by the minute (key conflicts and replays), so that health can ask
-- how many came within a window; counters keeps the running totals.
-- Buckets older than store.CountBuckets are dropped as new ones are made.
CREATE TABLE counts_by_minute (
    name   text   NOT NULL,
    minute bigint NOT NULL, -- Unix seconds, a multiple of 60
    n      bigint NOT NULL,
    PRIMARY KEY (name, minute)
);

-- Failures by reason within the window: only failures are indexed.
CREATE INDEX history_failed ON history (at, reason) WHERE to_state = 'failed' AND applied;

-- Accepted sends within the window and whether they made progress.
CREATE INDEX history_sent ON history (at, message_id) WHERE to_state = 'sent' AND applied;

-- Rows flagged maybe_sent, by state: few, so a small partial index.
CREATE INDEX messages_maybe_sent ON messages (state) WHERE maybe_sent;
