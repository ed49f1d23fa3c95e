-- Each identity's count of recipients in daily_recipients, kept by
-- triggers as rows come and go: a claim under a daily limit read it with
-- a count(*) over the day's recipients, up to a whole messaging tier
-- (100,000) on every claim. A claim drops the recipients that left the
-- window first (internal/store/sqlite/daily.go), so the count is the
-- window's. (PostgreSQL's 0023 also makes its history_events trigger read
-- by key; SQLite's, a row trigger, always did.)
CREATE TABLE daily_counts (
    identity   TEXT    NOT NULL PRIMARY KEY,
    recipients INTEGER NOT NULL
);
INSERT INTO daily_counts (identity, recipients)
SELECT identity, count(*) FROM daily_recipients GROUP BY identity;

CREATE TRIGGER daily_counts_insert AFTER INSERT ON daily_recipients
BEGIN
    INSERT INTO daily_counts (identity, recipients) VALUES (NEW.identity, 1)
    ON CONFLICT (identity) DO UPDATE SET recipients = recipients + 1;
END;

CREATE TRIGGER daily_counts_delete AFTER DELETE ON daily_recipients
BEGIN
    UPDATE daily_counts SET recipients = recipients - 1 WHERE identity = OLD.identity;
END;
