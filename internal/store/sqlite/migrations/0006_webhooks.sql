-- Evidence (docs/webhooks.md): raw webhook deliveries, the statuses and inbound
-- messages read from them, and the customer-service windows inbound
-- messages open. Times are INTEGER Unix microseconds, UTC.

-- Kept before the provider is answered, so that a crash after the 200
-- loses nothing; processed_at is set once their content is written.
CREATE TABLE webhook_events (
    id           TEXT    NOT NULL PRIMARY KEY,  -- ULID
    provider     TEXT    NOT NULL,
    identity     TEXT    NOT NULL DEFAULT '',
    headers      TEXT    NOT NULL DEFAULT '{}',  -- JSON object
    body         BLOB    NOT NULL,
    received_at  INTEGER NOT NULL,
    processed_at INTEGER,
    error        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX webhook_events_pending ON webhook_events (received_at, id) WHERE processed_at IS NULL;

-- Statuses providers reported. outcome is '' while pending (parked: no row
-- matched yet, or its drain still holds the lease); message_id is set with
-- the outcome, in the transaction that applied it.
CREATE TABLE evidence (
    id           TEXT    NOT NULL PRIMARY KEY,
    event_id     TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    identity     TEXT    NOT NULL DEFAULT '',
    dedupe_key   TEXT    NOT NULL,
    provider_id  TEXT    NOT NULL DEFAULT '',
    status       TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    callback_ref TEXT    NOT NULL DEFAULT '',
    error_code   TEXT    NOT NULL DEFAULT '',
    error        TEXT    NOT NULL DEFAULT '',
    message_id   TEXT    NOT NULL DEFAULT '',
    outcome      TEXT    NOT NULL DEFAULT '',
    received_at  INTEGER NOT NULL,
    applied_at   INTEGER
);
-- Deduplication is this index's job: a redelivered status is refused here.
CREATE UNIQUE INDEX evidence_dedupe ON evidence (provider, dedupe_key);
-- What EvidenceApply walks, oldest provider timestamp first.
CREATE INDEX evidence_pending ON evidence (at, id) WHERE outcome = '';
-- Parked statuses of a provider id that a status matched by its callback
-- reference has just recorded on a row.
CREATE INDEX evidence_pending_provider ON evidence (provider_id) WHERE outcome = '';
-- A row's statuses, oldest first (msgq show).
CREATE INDEX evidence_message ON evidence (message_id, at, id);

-- Messages customers sent us. message_id is NULL until a row is linked.
CREATE TABLE inbound (
    id                  TEXT    NOT NULL PRIMARY KEY,
    event_id            TEXT    NOT NULL,
    provider            TEXT    NOT NULL,
    identity            TEXT    NOT NULL DEFAULT '',
    provider_message_id TEXT    NOT NULL,
    sender              TEXT    NOT NULL DEFAULT '',  -- E.164; "from" is a keyword
    type                TEXT    NOT NULL DEFAULT '',
    text                TEXT    NOT NULL DEFAULT '',
    reply_id            TEXT    NOT NULL DEFAULT '',
    reply_title         TEXT    NOT NULL DEFAULT '',
    context_id          TEXT    NOT NULL DEFAULT '',
    message_id          TEXT,
    received_at         INTEGER NOT NULL,
    stored_at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX inbound_provider_message ON inbound (provider, provider_message_id);
-- msgq inbox, newest first; and its work list of unattributed messages.
CREATE INDEX inbound_received ON inbound (received_at, id);
CREATE INDEX inbound_unattributed ON inbound (received_at, id) WHERE message_id IS NULL;
-- Replies whose context a later provider id may still explain.
CREATE INDEX inbound_unattributed_context ON inbound (context_id) WHERE message_id IS NULL AND context_id <> '';

-- When a customer last wrote to an identity: the 24-hour window is open
-- until then plus its length.
CREATE TABLE service_windows (
    identity        TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,
    last_inbound_at INTEGER NOT NULL,
    PRIMARY KEY (identity, recipient)
) WITHOUT ROWID;

-- Statuses and reply contexts name a row by its provider id.
CREATE INDEX messages_provider_id ON messages (provider_id) WHERE provider_id <> '';
