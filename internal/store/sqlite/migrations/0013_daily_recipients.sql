-- The daily unique-recipient limit (docs/configuration.md, "Daily
-- recipients"): the recipients each limited identity was claimed for, and
-- when last. A claim counts the recipients whose last_at is within the
-- last 24 hours and records its own in the same transaction, so drains
-- racing cannot exceed the limit. Rows older than the window are deleted
-- by later claims. A new table only: stores of any earlier version take it
-- as they are.
CREATE TABLE daily_recipients (
    identity  TEXT    NOT NULL,
    recipient TEXT    NOT NULL,
    last_at   INTEGER NOT NULL, -- Unix microseconds: the latest claim of a row to it
    PRIMARY KEY (identity, recipient)
) WITHOUT ROWID;
CREATE INDEX daily_recipients_at ON daily_recipients (identity, last_at);
