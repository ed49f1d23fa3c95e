-- Nothing a provider says is dropped without a trace: what a webhook says
-- about an identity rather than a message (account-level errors, template
-- status, number quality, account updates) and whatever msgq does not
-- understand is kept here, deduplicated, and counted and listed.
CREATE TABLE notices (
    id          text        NOT NULL PRIMARY KEY,
    event_id    text        NOT NULL,
    provider    text        NOT NULL,
    identity    text        NOT NULL DEFAULT '',
    kind        text        NOT NULL,
    field       text        NOT NULL DEFAULT '',
    code        text        NOT NULL DEFAULT '',
    subject     text        NOT NULL DEFAULT '',
    lang        text        NOT NULL DEFAULT '',
    value       text        NOT NULL DEFAULT '',
    detail      text        NOT NULL DEFAULT '',
    dedupe_key  text        NOT NULL,
    at          timestamptz,
    received_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX notices_dedupe ON notices (provider, identity, dedupe_key);
CREATE INDEX notices_received ON notices (received_at, id);
CREATE INDEX notices_kind ON notices (kind, received_at, id);

-- The latest status a provider reported of a template for an identity,
-- and as of when (the provider's time): PAUSED, DISABLED or REJECTED hold
-- its queued rows (last_error says so) until APPROVED (or REINSTATED)
-- releases them. A notice older than the status kept changes nothing, so
-- a late redelivery of PAUSED cannot hold an approved template again.
CREATE TABLE template_holds (
    identity  text        NOT NULL,
    template  text        NOT NULL,
    lang      text        NOT NULL,
    status    text        NOT NULL,
    since     timestamptz NOT NULL,
    notice_id text        NOT NULL,
    PRIMARY KEY (identity, template, lang)
);
CREATE INDEX messages_template_held ON messages (identity)
    WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: ';
