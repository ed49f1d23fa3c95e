-- Verification challenges (docs/challenges.md): one logical send with
-- ordered steps, each a message row of its own (challenge_steps links
-- them), and one deadline. A step not yet released waits in queued with
-- next_attempt_at at store.HeldUntil, so that claims (which take only due
-- rows) never see it; the release sets it to the step's release time.
CREATE TABLE challenges (
    id                    text        PRIMARY KEY,
    tenant                text        NOT NULL,
    key                   text        NOT NULL,
    body_hash             text        NOT NULL,
    deadline              timestamptz,          -- NULL: none
    accept_duplicate_risk boolean     NOT NULL,
    fallback_undelivered  boolean     NOT NULL,
    supersedes            text        NOT NULL DEFAULT '',
    outcome               text        NOT NULL, -- open, completed, expired, failed, superseded
    by_step               integer     NOT NULL DEFAULT 0,
    blocked_step          integer     NOT NULL DEFAULT 0,
    why                   text        NOT NULL DEFAULT '',
    next_at               timestamptz,          -- decide again then without new evidence
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    UNIQUE (tenant, key)
);
CREATE INDEX challenges_open ON challenges (next_at) WHERE outcome = 'open';

CREATE TABLE challenge_steps (
    challenge_id text        NOT NULL,
    step         integer     NOT NULL, -- 1-based
    message_id   text        NOT NULL UNIQUE,
    release_at   timestamptz NOT NULL,
    released     boolean     NOT NULL,
    why          text        NOT NULL DEFAULT '',
    seen_state   text        NOT NULL, -- the row's state at the last decision: a tick decides again when it changed
    PRIMARY KEY (challenge_id, step)
);
