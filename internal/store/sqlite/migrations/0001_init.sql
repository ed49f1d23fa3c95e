-- Times are INTEGER Unix microseconds, UTC (the resolution PostgreSQL keeps).

CREATE TABLE messages (
    id              TEXT    NOT NULL PRIMARY KEY,  -- ULID: sortable by creation
    tenant          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    body_hash       TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,              -- E.164
    channel         TEXT    NOT NULL,
    identity        TEXT    NOT NULL,
    purpose         TEXT    NOT NULL DEFAULT '',
    trigger_ref     TEXT    NOT NULL DEFAULT '',
    lane            TEXT    NOT NULL,
    payload         TEXT,                          -- JSON; NULL once purged
    state           TEXT    NOT NULL,
    reason          TEXT    NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    expires_at      INTEGER,
    lease_owner     TEXT    NOT NULL DEFAULT '',
    lease_until     INTEGER,
    provider_id     TEXT    NOT NULL DEFAULT '',
    last_error      TEXT    NOT NULL DEFAULT '',
    resend_of       TEXT    NOT NULL DEFAULT '',
    resolution      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

-- Idempotency is this index's job, never a check-then-insert.
CREATE UNIQUE INDEX messages_tenant_key ON messages (tenant, key);
-- What drain claims: due queued rows, reply lane first, oldest first (id
-- breaks ties, so a claim reads the index in order and stops at its limit).
CREATE INDEX messages_due ON messages (lane DESC, next_attempt_at, id) WHERE state = 'queued';
-- What an operator must look at.
CREATE INDEX messages_in_flight ON messages (updated_at) WHERE state IN ('sending', 'unknown');

-- Clustered by message: one b-tree, and a row's history is one range read.
-- seq numbers a message's entries from 1.
CREATE TABLE history (
    message_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    event      TEXT    NOT NULL,
    applied    INTEGER NOT NULL,
    source     TEXT    NOT NULL,
    detail     TEXT    NOT NULL DEFAULT '',
    at         INTEGER NOT NULL,
    PRIMARY KEY (message_id, seq)
) WITHOUT ROWID;

CREATE TABLE attempts (
    seq              INTEGER PRIMARY KEY,
    message_id       TEXT    NOT NULL,
    number           INTEGER NOT NULL,
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER NOT NULL,
    class            TEXT    NOT NULL,
    http_status      INTEGER NOT NULL DEFAULT 0,
    provider_code    TEXT    NOT NULL DEFAULT '',
    provider_subcode TEXT    NOT NULL DEFAULT '',
    raw_error        TEXT    NOT NULL DEFAULT '',
    latency_us       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX attempts_message ON attempts (message_id, seq);
