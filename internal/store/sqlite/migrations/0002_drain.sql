-- Drain: sending identities' pause state, and pacing shared by every drain
-- process (docs/drain.md). Times are INTEGER Unix microseconds, UTC.

CREATE TABLE identities (
    name          TEXT    NOT NULL PRIMARY KEY,
    paused        INTEGER NOT NULL DEFAULT 0,
    paused_reason TEXT    NOT NULL DEFAULT '',
    paused_at     INTEGER,
    updated_at    INTEGER NOT NULL
);

-- The earliest time the identity may start its next provider call: each
-- claim takes the slot at max(now, next_at) and moves next_at on by
-- 1/rate, so calls are spaced evenly whatever the number of drains.
CREATE TABLE identity_pace (
    identity TEXT    NOT NULL PRIMARY KEY,
    next_at  INTEGER NOT NULL
);

-- The earliest time a recipient may get the identity's next message.
CREATE TABLE recipient_pace (
    identity  TEXT    NOT NULL,
    recipient TEXT    NOT NULL,
    next_at   INTEGER NOT NULL,
    PRIMARY KEY (identity, recipient)
) WITHOUT ROWID;

-- Set when a call's answer was lost and the row was retried with the same
-- key: that call may have reached the phone, so running out of attempts or
-- time later makes the row unknown, never failed.
ALTER TABLE messages ADD COLUMN maybe_sent INTEGER NOT NULL DEFAULT 0;

-- Queued rows with a deadline, for the claim's expiry sweep.
CREATE INDEX messages_expiring ON messages (expires_at) WHERE state = 'queued' AND expires_at IS NOT NULL;
