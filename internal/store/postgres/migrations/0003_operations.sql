-- Operations (docs/operations.md): what msgq stuck, stats, health and purge read.
-- Rows by identity and state are counted when asked (parallel scans); a
-- counter row kept by triggers would serialise every drain's claims on it.

-- Running totals (key replays: something ran twice).
CREATE TABLE counters (
    name text   NOT NULL PRIMARY KEY,
    n    bigint NOT NULL
);

-- Attempts by class over the last hour.
CREATE INDEX attempts_finished ON attempts (finished_at);

-- Sent-to-delivered latency: only deliveries are indexed, so other
-- history rows cost nothing more.
CREATE INDEX history_delivered ON history (at) WHERE to_state = 'delivered' AND applied;
