-- Opt-outs (docs/providers.md, "Opt-outs"): a recipient who opted out of an
-- identity (an inbound STOP, the provider's own opted-out answer) gets no
-- further sends from it until they opt in again (START, UNSTOP). The row
-- stays when an opt-out is lifted, so that evidence arriving out of order
-- (an older STOP after a newer START) cannot undo the newer change.
CREATE TABLE opt_outs (
    identity    TEXT    NOT NULL,
    recipient   TEXT    NOT NULL, -- normalised: E.164 or a lower-cased email address
    opted_out   INTEGER NOT NULL, -- 1: opted out; 0: opted in again
    source      TEXT    NOT NULL, -- what said so: "inbound STOP", "twilio 21610", ...
    changed_at  INTEGER NOT NULL, -- Unix microseconds: when the evidence says it changed
    recorded_at INTEGER NOT NULL, -- Unix microseconds: when msgq recorded it
    PRIMARY KEY (identity, recipient)
) WITHOUT ROWID;
