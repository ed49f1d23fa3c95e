-- Opt-outs (docs/providers.md, "Opt-outs"): a recipient who opted out of an
-- identity (an inbound STOP, the provider's own opted-out answer) gets no
-- further sends from it until they opt in again (START, UNSTOP). The row
-- stays when an opt-out is lifted, so that evidence arriving out of order
-- (an older STOP after a newer START) cannot undo the newer change.
CREATE TABLE opt_outs (
    identity    text        NOT NULL,
    recipient   text        NOT NULL, -- normalised: E.164 or a lower-cased email address
    opted_out   boolean     NOT NULL, -- true: opted out; false: opted in again
    source      text        NOT NULL, -- what said so: "inbound STOP", "twilio 21610", ...
    changed_at  timestamptz NOT NULL, -- when the evidence says it changed
    recorded_at timestamptz NOT NULL, -- when msgq recorded it (the server's clock)
    PRIMARY KEY (identity, recipient)
);
