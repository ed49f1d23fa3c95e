-- Every statement on a hot path costs in proportion to its batch, never
-- to the table (internal/store/sqlite/ops_plan_test.go asks SQLite for
-- the plan of each). A queue keeps every finished row, so what stats,
-- health, the webhook processor and reconcile read must not include
-- "every row ever":
--
-- 1. Counts that only grow are kept in counters by triggers, in the
--    transaction of each change, as 0003 keeps state_counts (SQLite has
--    one writer: a counter row costs no concurrency): resends, rows
--    flagged maybe_sent by state, rows sharing a provider id, challenges
--    by outcome, superseding sends, fallbacks released, events whose
--    endpoint gave up, parked and suspect statuses, unattributed replies,
--    unreadable deliveries, notices. Each trigger fires only when a
--    counted column changes.
-- 2. Windowed figures read an index of their window (recent resends,
--    recently expired challenges).
-- 3. Parked statuses and unattributed replies are tried again on a
--    schedule (retry_at), not on every round.

CREATE TRIGGER messages_flag_counts_insert AFTER INSERT ON messages
WHEN NEW.maybe_sent OR NEW.resend_of <> '' BEGIN
    INSERT INTO counters (name, n) SELECT 'maybe_sent:' || NEW.state, 1 WHERE NEW.maybe_sent
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'resends', 1 WHERE NEW.resend_of <> ''
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER messages_flag_counts_update AFTER UPDATE OF state, maybe_sent, resend_of ON messages
WHEN (OLD.maybe_sent OR NEW.maybe_sent) AND (OLD.state <> NEW.state OR OLD.maybe_sent <> NEW.maybe_sent)
     OR (OLD.resend_of <> '') <> (NEW.resend_of <> '') BEGIN
    INSERT INTO counters (name, n) SELECT 'maybe_sent:' || OLD.state, -1 WHERE OLD.maybe_sent
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'maybe_sent:' || NEW.state, 1 WHERE NEW.maybe_sent
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'resends', (NEW.resend_of <> '') - (OLD.resend_of <> '')
    WHERE (NEW.resend_of <> '') <> (OLD.resend_of <> '')
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER messages_flag_counts_delete AFTER DELETE ON messages
WHEN OLD.maybe_sent OR OLD.resend_of <> '' BEGIN
    INSERT INTO counters (name, n) SELECT 'maybe_sent:' || OLD.state, -1 WHERE OLD.maybe_sent
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'resends', -1 WHERE OLD.resend_of <> ''
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER messages_collision_counts_insert AFTER INSERT ON messages
WHEN NEW.provider_id_collision <> '' BEGIN
    INSERT INTO counters (name, n) VALUES ('provider_id_collisions', 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER messages_collision_counts_update AFTER UPDATE OF provider_id_collision ON messages
WHEN (OLD.provider_id_collision <> '') <> (NEW.provider_id_collision <> '') BEGIN
    INSERT INTO counters (name, n) VALUES ('provider_id_collisions', CASE WHEN NEW.provider_id_collision <> '' THEN 1 ELSE -1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER messages_collision_counts_delete AFTER DELETE ON messages
WHEN OLD.provider_id_collision <> '' BEGIN
    INSERT INTO counters (name, n) VALUES ('provider_id_collisions', -1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER challenge_counts_insert AFTER INSERT ON challenges
WHEN NEW.outcome <> 'open' OR NEW.supersedes <> '' BEGIN
    INSERT INTO counters (name, n) SELECT 'challenges:' || NEW.outcome || ':' || NEW.by_step, 1 WHERE NEW.outcome <> 'open'
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'superseding_sends', 1 WHERE NEW.supersedes <> ''
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER challenge_counts_update AFTER UPDATE OF outcome, by_step, supersedes ON challenges
WHEN OLD.outcome <> NEW.outcome OR OLD.by_step <> NEW.by_step OR OLD.supersedes <> NEW.supersedes BEGIN
    INSERT INTO counters (name, n) SELECT 'challenges:' || OLD.outcome || ':' || OLD.by_step, -1 WHERE OLD.outcome <> 'open'
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'challenges:' || NEW.outcome || ':' || NEW.by_step, 1 WHERE NEW.outcome <> 'open'
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT 'superseding_sends', (NEW.supersedes <> '') - (OLD.supersedes <> '')
    WHERE (NEW.supersedes <> '') <> (OLD.supersedes <> '')
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- A later step released is a fallback fired.
CREATE TRIGGER challenge_step_counts_insert AFTER INSERT ON challenge_steps
WHEN NEW.step > 1 AND NEW.released BEGIN
    INSERT INTO counters (name, n) VALUES ('fallbacks_fired', 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER challenge_step_counts_update AFTER UPDATE OF step, released ON challenge_steps
WHEN (OLD.step > 1 AND OLD.released) <> (NEW.step > 1 AND NEW.released) BEGIN
    INSERT INTO counters (name, n) VALUES ('fallbacks_fired', CASE WHEN NEW.step > 1 AND NEW.released THEN 1 ELSE -1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- Events whose endpoint gave up (dead): few, until purged or retried.
CREATE TRIGGER event_counts_insert AFTER INSERT ON events
WHEN NEW.dead_at IS NOT NULL BEGIN
    INSERT INTO counters (name, n) VALUES ('dead_events', 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER event_counts_update AFTER UPDATE OF dead_at ON events
WHEN (OLD.dead_at IS NULL) <> (NEW.dead_at IS NULL) BEGIN
    INSERT INTO counters (name, n) VALUES ('dead_events', CASE WHEN NEW.dead_at IS NULL THEN -1 ELSE 1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER event_counts_delete AFTER DELETE ON events
WHEN OLD.dead_at IS NOT NULL BEGIN
    INSERT INTO counters (name, n) VALUES ('dead_events', -1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- Parked statuses (every status is pending until applied) and those set
-- aside as suspect.
CREATE TRIGGER evidence_counts_insert AFTER INSERT ON evidence
WHEN NEW.outcome IN ('', 'suspect') BEGIN
    INSERT INTO counters (name, n) VALUES (CASE NEW.outcome WHEN '' THEN 'parked_evidence' ELSE 'suspect_evidence' END, 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER evidence_counts_update AFTER UPDATE OF outcome ON evidence
WHEN OLD.outcome <> NEW.outcome AND (OLD.outcome IN ('', 'suspect') OR NEW.outcome IN ('', 'suspect')) BEGIN
    INSERT INTO counters (name, n) SELECT CASE OLD.outcome WHEN '' THEN 'parked_evidence' ELSE 'suspect_evidence' END, -1
    WHERE OLD.outcome IN ('', 'suspect')
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (name, n) SELECT CASE NEW.outcome WHEN '' THEN 'parked_evidence' ELSE 'suspect_evidence' END, 1
    WHERE NEW.outcome IN ('', 'suspect')
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER evidence_counts_delete AFTER DELETE ON evidence
WHEN OLD.outcome IN ('', 'suspect') BEGIN
    INSERT INTO counters (name, n) VALUES (CASE OLD.outcome WHEN '' THEN 'parked_evidence' ELSE 'suspect_evidence' END, -1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- Deliveries processed with an error (unreadable: kept for a person, or a
-- fixed parser, never purged).
CREATE TRIGGER webhook_event_counts_insert AFTER INSERT ON webhook_events
WHEN NEW.error <> '' BEGIN
    INSERT INTO counters (name, n) VALUES ('unreadable_webhooks', 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER webhook_event_counts_update AFTER UPDATE OF error ON webhook_events
WHEN (OLD.error <> '') <> (NEW.error <> '') BEGIN
    INSERT INTO counters (name, n) VALUES ('unreadable_webhooks', CASE WHEN NEW.error <> '' THEN 1 ELSE -1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER webhook_event_counts_delete AFTER DELETE ON webhook_events
WHEN OLD.error <> '' BEGIN
    INSERT INTO counters (name, n) VALUES ('unreadable_webhooks', -1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- Provider notices, and those msgq did not understand.
CREATE TRIGGER notice_counts_insert AFTER INSERT ON notices BEGIN
    INSERT INTO counters (name, n) SELECT name, 1 FROM (SELECT 'notices' AS name UNION ALL SELECT 'unknown_notices' WHERE NEW.kind = 'unknown') WHERE true
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER notice_counts_update AFTER UPDATE OF kind ON notices
WHEN (OLD.kind = 'unknown') <> (NEW.kind = 'unknown') BEGIN
    INSERT INTO counters (name, n) VALUES ('unknown_notices', CASE WHEN NEW.kind = 'unknown' THEN 1 ELSE -1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER notice_counts_delete AFTER DELETE ON notices BEGIN
    INSERT INTO counters (name, n) SELECT name, -1 FROM (SELECT 'notices' AS name UNION ALL SELECT 'unknown_notices' WHERE OLD.kind = 'unknown') WHERE true
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- Replies linked to no message.
CREATE TRIGGER inbound_counts_insert AFTER INSERT ON inbound
WHEN NEW.message_id IS NULL BEGIN
    INSERT INTO counters (name, n) VALUES ('unattributed_inbound', 1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER inbound_counts_update AFTER UPDATE OF message_id ON inbound
WHEN (OLD.message_id IS NULL) <> (NEW.message_id IS NULL) BEGIN
    INSERT INTO counters (name, n) VALUES ('unattributed_inbound', CASE WHEN NEW.message_id IS NULL THEN 1 ELSE -1 END)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER inbound_counts_delete AFTER DELETE ON inbound
WHEN OLD.message_id IS NULL BEGIN
    INSERT INTO counters (name, n) VALUES ('unattributed_inbound', -1)
    ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;
END;

-- The counts start from the rows there are (the migration holds the
-- write lock).
INSERT INTO counters (name, n)
SELECT name, n FROM (
    SELECT 'resends' AS name, count(*) AS n FROM messages WHERE resend_of <> ''
    UNION ALL SELECT 'maybe_sent:' || state, count(*) FROM messages WHERE maybe_sent = 1 GROUP BY state
    UNION ALL SELECT 'challenges:' || outcome || ':' || by_step, count(*) FROM challenges WHERE outcome <> 'open' GROUP BY outcome, by_step
    UNION ALL SELECT 'superseding_sends', count(*) FROM challenges WHERE supersedes <> ''
    UNION ALL SELECT 'fallbacks_fired', count(*) FROM challenge_steps WHERE step > 1 AND released
    UNION ALL SELECT 'dead_events', count(*) FROM events WHERE dead_at IS NOT NULL
    UNION ALL SELECT 'parked_evidence', count(*) FROM evidence WHERE outcome = ''
    UNION ALL SELECT 'unattributed_inbound', count(*) FROM inbound WHERE message_id IS NULL
    UNION ALL SELECT 'provider_id_collisions', count(*) FROM messages WHERE provider_id_collision <> ''
    UNION ALL SELECT 'suspect_evidence', count(*) FROM evidence WHERE outcome = 'suspect'
    UNION ALL SELECT 'unreadable_webhooks', count(*) FROM webhook_events WHERE error <> ''
    UNION ALL SELECT 'notices', count(*) FROM notices
    UNION ALL SELECT 'unknown_notices', count(*) FROM notices WHERE kind = 'unknown'
)
WHERE n > 0
ON CONFLICT (name) DO UPDATE SET n = excluded.n;

-- 2. Windows. Resends made within the window, by creation; challenges
-- that expired within it, by deadline.
CREATE INDEX messages_resends_created ON messages (created_at) WHERE resend_of <> '';
CREATE INDEX challenges_expired ON challenges (deadline) WHERE outcome = 'expired';

-- 3. Retries on a schedule (Unix microseconds; 0: due). A status whose
-- message is not known yet (parked), or a reply whose context is no
-- message's provider id yet, is tried again when retry_at comes: at once
-- when new, then after an eighth of its age each time it still matches
-- nothing. Each round reads only what is due, never every status parked
-- since the store was made.
ALTER TABLE evidence ADD COLUMN retry_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX evidence_retry ON evidence (retry_at, at, id) WHERE outcome = '';
ALTER TABLE inbound ADD COLUMN retry_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX inbound_retry ON inbound (retry_at, id) WHERE message_id IS NULL AND context_id <> '';

-- What is parked at the upgrade was tried now: due again an eighth of its
-- age from now, so that the first rounds after it read what comes, not
-- the whole backlog at once.
UPDATE evidence SET retry_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000000
    + max(CAST(strftime('%s', 'now') AS INTEGER) * 1000000 - received_at, 0) / 8
WHERE outcome = '';
UPDATE inbound SET retry_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000000
    + max(CAST(strftime('%s', 'now') AS INTEGER) * 1000000 - stored_at, 0) / 8
WHERE message_id IS NULL AND context_id <> '';
