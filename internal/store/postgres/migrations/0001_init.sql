-- msgq's whole schema, PostgreSQL dialect. Ids and keys use the "C"
-- collation: byte order, so ULIDs sort by creation and a key prefix is a
-- plain index range whatever the database's default collation.

CREATE TABLE messages (
    id              text COLLATE "C" NOT NULL PRIMARY KEY,  -- ULID: sortable by creation
    tenant          text COLLATE "C" NOT NULL,
    key             text COLLATE "C" NOT NULL,
    body_hash       text        NOT NULL,
    recipient       text        NOT NULL,                  -- E.164
    channel         text        NOT NULL,
    identity        text        NOT NULL,
    purpose         text        NOT NULL DEFAULT '',
    trigger_ref     text        NOT NULL DEFAULT '',
    lane            text        NOT NULL,
    payload         text,                                  -- JSON; NULL once purged
    state           text        NOT NULL,
    reason          text        NOT NULL DEFAULT '',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    expires_at      timestamptz,
    lease_owner     text        NOT NULL DEFAULT '',
    lease_until     timestamptz,
    provider_id     text        NOT NULL DEFAULT '',
    last_error      text        NOT NULL DEFAULT '',
    resend_of       text        NOT NULL DEFAULT '',
    resolution      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    -- Set when a call's answer was lost and the row was retried with the
    -- same key: running out of attempts or time later makes it unknown.
    maybe_sent      boolean     NOT NULL DEFAULT false
);

-- Idempotency is this index's job, never a check-then-insert.
CREATE UNIQUE INDEX messages_tenant_key ON messages (tenant, key);
-- What drain claims: due queued rows, reply lane first, oldest first.
CREATE INDEX messages_due ON messages (lane DESC, next_attempt_at, id) WHERE state = 'queued';
-- What an operator must look at.
CREATE INDEX messages_in_flight ON messages (updated_at) WHERE state IN ('sending', 'unknown');
-- Queued rows with a deadline, for the claim's expiry sweep.
CREATE INDEX messages_expiring ON messages (expires_at) WHERE state = 'queued' AND expires_at IS NOT NULL;

-- seq numbers a message's entries from 1.
CREATE TABLE history (
    message_id text COLLATE "C" NOT NULL,
    seq        integer     NOT NULL,
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    event      text        NOT NULL,
    applied    boolean     NOT NULL,
    source     text        NOT NULL,
    detail     text        NOT NULL DEFAULT '',
    at         timestamptz NOT NULL,
    PRIMARY KEY (message_id, seq)
);

CREATE TABLE attempts (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id       text COLLATE "C" NOT NULL,
    number           integer     NOT NULL,
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz NOT NULL,
    class            text        NOT NULL,
    http_status      integer     NOT NULL DEFAULT 0,
    provider_code    text        NOT NULL DEFAULT '',
    provider_subcode text        NOT NULL DEFAULT '',
    raw_error        text        NOT NULL DEFAULT '',
    latency_us       bigint      NOT NULL DEFAULT 0
);
CREATE INDEX attempts_message ON attempts (message_id, seq);

-- Sending identities' pause state.
CREATE TABLE identities (
    name          text        NOT NULL PRIMARY KEY,
    paused        boolean     NOT NULL DEFAULT false,
    paused_reason text        NOT NULL DEFAULT '',
    paused_at     timestamptz,
    updated_at    timestamptz NOT NULL
);

-- The earliest time the identity may start its next provider call, shared
-- by every drain. A claim locks its identities' rows (FOR UPDATE), so
-- claims of one paced identity are serialised and others run beside them.
CREATE TABLE identity_pace (
    identity text        NOT NULL PRIMARY KEY,
    next_at  timestamptz NOT NULL
);

-- The earliest time a recipient may get the identity's next message.
CREATE TABLE recipient_pace (
    identity  text        NOT NULL,
    recipient text        NOT NULL,
    next_at   timestamptz NOT NULL,
    PRIMARY KEY (identity, recipient)
);
