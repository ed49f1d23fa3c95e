-- Evidence (docs/webhooks.md): raw webhook deliveries, the statuses and inbound
-- messages read from them, and the customer-service windows inbound
-- messages open.

-- Kept before the provider is answered, so that a crash after the 200
-- loses nothing; processed_at is set once their content is written.
CREATE TABLE webhook_events (
    id           text COLLATE "C" NOT NULL PRIMARY KEY,  -- ULID
    provider     text        NOT NULL,
    identity     text        NOT NULL DEFAULT '',
    headers      text        NOT NULL DEFAULT '{}',      -- JSON object
    body         bytea       NOT NULL,
    received_at  timestamptz NOT NULL,
    processed_at timestamptz,
    error        text        NOT NULL DEFAULT ''
);
CREATE INDEX webhook_events_pending ON webhook_events (received_at, id) WHERE processed_at IS NULL;

-- Statuses providers reported. outcome is '' while pending (parked: no row
-- matched yet, or its drain still holds the lease); message_id is set with
-- the outcome, in the transaction that applied it.
CREATE TABLE evidence (
    id           text COLLATE "C" NOT NULL PRIMARY KEY,
    event_id     text COLLATE "C" NOT NULL,
    provider     text        NOT NULL,
    identity     text        NOT NULL DEFAULT '',
    dedupe_key   text        NOT NULL,
    provider_id  text        NOT NULL DEFAULT '',
    status       text        NOT NULL,
    at           timestamptz NOT NULL,
    callback_ref text        NOT NULL DEFAULT '',
    error_code   text        NOT NULL DEFAULT '',
    error        text        NOT NULL DEFAULT '',
    message_id   text COLLATE "C" NOT NULL DEFAULT '',
    outcome      text        NOT NULL DEFAULT '',
    received_at  timestamptz NOT NULL,
    applied_at   timestamptz
);
-- Deduplication is this index's job: a redelivered status is refused here.
CREATE UNIQUE INDEX evidence_dedupe ON evidence (provider, dedupe_key);
-- What EvidenceApply walks, oldest provider timestamp first.
CREATE INDEX evidence_pending ON evidence (at, id) WHERE outcome = '';
-- A row's statuses, oldest first (msgq show).
CREATE INDEX evidence_message ON evidence (message_id, at, id);

-- Messages customers sent us. message_id is NULL until a row is linked.
CREATE TABLE inbound (
    id                  text COLLATE "C" NOT NULL PRIMARY KEY,
    event_id            text COLLATE "C" NOT NULL,
    provider            text        NOT NULL,
    identity            text        NOT NULL DEFAULT '',
    provider_message_id text        NOT NULL,
    sender              text        NOT NULL DEFAULT '',  -- E.164; "from" is a keyword
    type                text        NOT NULL DEFAULT '',
    text                text        NOT NULL DEFAULT '',
    reply_id            text        NOT NULL DEFAULT '',
    reply_title         text        NOT NULL DEFAULT '',
    context_id          text        NOT NULL DEFAULT '',
    message_id          text COLLATE "C",
    received_at         timestamptz NOT NULL,
    stored_at           timestamptz NOT NULL
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
    identity        text        NOT NULL,
    recipient       text        NOT NULL,
    last_inbound_at timestamptz NOT NULL,
    PRIMARY KEY (identity, recipient)
);

-- Statuses and reply contexts name a row by its provider id.
CREATE INDEX messages_provider_id ON messages (provider_id) WHERE provider_id <> '';
