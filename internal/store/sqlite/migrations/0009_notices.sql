-- Nothing a provider says is dropped without a trace: what a webhook says
-- about an identity rather than a message (account-level errors, template
-- status, number quality, account updates) and whatever msgq does not
-- understand is kept here, deduplicated, and counted and listed. Times are
-- INTEGER Unix microseconds, UTC; at is NULL when the provider gave none.
CREATE TABLE notices (
    id          TEXT    NOT NULL PRIMARY KEY,
    event_id    TEXT    NOT NULL,
    provider    TEXT    NOT NULL,
    identity    TEXT    NOT NULL DEFAULT '',
    kind        TEXT    NOT NULL,
    field       TEXT    NOT NULL DEFAULT '',
    code        TEXT    NOT NULL DEFAULT '',
    subject     TEXT    NOT NULL DEFAULT '',
    lang        TEXT    NOT NULL DEFAULT '',
    value       TEXT    NOT NULL DEFAULT '',
    detail      TEXT    NOT NULL DEFAULT '',
    dedupe_key  TEXT    NOT NULL,
    at          INTEGER,
    received_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX notices_dedupe ON notices (provider, identity, dedupe_key);
-- msgq webhook notices, newest first, and by kind (unknown ones counted).
CREATE INDEX notices_received ON notices (received_at, id);
CREATE INDEX notices_kind ON notices (kind, received_at, id);

-- The latest status a provider reported of a template for an identity,
-- and as of when (the provider's time): PAUSED, DISABLED or REJECTED hold
-- its queued rows (last_error says so) until APPROVED (or REINSTATED)
-- releases them. A notice older than the status kept changes nothing, so
-- a late redelivery of PAUSED cannot hold an approved template again.
CREATE TABLE template_holds (
    identity  TEXT    NOT NULL,
    template  TEXT    NOT NULL,
    lang      TEXT    NOT NULL,
    status    TEXT    NOT NULL,
    since     INTEGER NOT NULL,
    notice_id TEXT    NOT NULL,
    PRIMARY KEY (identity, template, lang)
) WITHOUT ROWID;
-- Rows a template hold put back, by identity: counted by stats, released
-- by an APPROVED notice. The predicate is repeated literally where used.
CREATE INDEX messages_template_held ON messages (identity)
    WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: ';
