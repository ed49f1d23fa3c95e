-- Verification challenges (docs/challenges.md): one logical send with
-- ordered steps, each a message row of its own (challenge_steps links
-- them), and one deadline. A step not yet released waits in queued with
-- next_attempt_at at store.HeldUntil, so that claims (which take only due
-- rows) never see it; the release sets it to the step's release time.
CREATE TABLE challenges (
    id                    TEXT    PRIMARY KEY,
    tenant                TEXT    NOT NULL,
    key                   TEXT    NOT NULL,
    body_hash             TEXT    NOT NULL,
    deadline              INTEGER,          -- Unix microseconds; NULL: none
    accept_duplicate_risk INTEGER NOT NULL,
    fallback_undelivered  INTEGER NOT NULL,
    supersedes            TEXT    NOT NULL DEFAULT '',
    outcome               TEXT    NOT NULL, -- open, completed, expired, failed, superseded
    by_step               INTEGER NOT NULL DEFAULT 0,
    blocked_step          INTEGER NOT NULL DEFAULT 0,
    why                   TEXT    NOT NULL DEFAULT '',
    next_at               INTEGER,          -- Unix microseconds: decide again then without new evidence
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    UNIQUE (tenant, key)
);
CREATE INDEX challenges_open ON challenges (next_at) WHERE outcome = 'open';

CREATE TABLE challenge_steps (
    challenge_id TEXT    NOT NULL,
    step         INTEGER NOT NULL, -- 1-based
    message_id   TEXT    NOT NULL UNIQUE,
    release_at   INTEGER NOT NULL, -- Unix microseconds
    released     INTEGER NOT NULL,
    why          TEXT    NOT NULL DEFAULT '',
    seen_state   TEXT    NOT NULL, -- the row's state at the last decision: a tick decides again when it changed
    PRIMARY KEY (challenge_id, step)
) WITHOUT ROWID;
