-- Every statement on a hot path costs in proportion to its batch, never
-- to the table (internal/store/postgres/scale_test.go counts the work).
-- A queue keeps every finished row, so what stats, health, the webhook
-- processor and reconcile read must not include "every row ever":
--
-- 1. Counts that only grow are kept, in the transaction of each change:
--    rows by identity and state (stats counted them with a scan of
--    messages), and in counters the rows of a class (resends, rows
--    flagged maybe_sent by state, rows sharing a provider id,
--    challenges by outcome, superseding sends, fallbacks released,
--    events whose endpoint gave up, parked and suspect statuses,
--    unattributed replies, unreadable deliveries, notices).
-- 2. Windowed figures read an index of their window (recent resends,
--    recently expired challenges).
-- 3. Parked statuses and unattributed replies are tried again on a
--    schedule (retry_at), not on every round.

-- 1. Kept counts. A counter row updated by every change would make
-- concurrent drains wait for each other's commits on it, so changes
-- append deltas instead (no lock, no index), and fold_counts adds them
-- into state_counts and counters now and then: a reader sums the two,
-- which is exact at any moment. A statement whose delta takes a number
-- of count_deltas_seq that is a multiple of 1024 folds, if no other
-- transaction is folding (the folder holds an advisory lock, so the
-- folded rows never wait on each other); readers therefore sum about a
-- thousand deltas at most. Only a READ COMMITTED transaction folds: in
-- a REPEATABLE READ one, a delta another folder deleted since its
-- snapshot would fail the transaction.
CREATE SEQUENCE count_deltas_seq;

CREATE TABLE state_counts (
    identity text   NOT NULL,
    state    text   NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (identity, state)
);

CREATE TABLE state_count_deltas (
    seq      bigint NOT NULL DEFAULT nextval('count_deltas_seq'),
    identity text   NOT NULL,
    state    text   NOT NULL,
    n        bigint NOT NULL
);

CREATE TABLE counter_deltas (
    seq  bigint NOT NULL DEFAULT nextval('count_deltas_seq'),
    name text   NOT NULL,
    n    bigint NOT NULL
);

-- Each fold deletes what it folds: vacuumed after a fold's worth of dead
-- rows, the delta tables stay a few pages, however busy the queue.
ALTER TABLE state_count_deltas SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);
ALTER TABLE counter_deltas SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);

CREATE FUNCTION fold_counts() RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR NOT pg_try_advisory_xact_lock(hashtextextended('msgq.fold_counts.' || current_schema(), 0)) THEN
        RETURN;
    END IF;
    WITH d AS (DELETE FROM state_count_deltas RETURNING identity, state, n)
    INSERT INTO state_counts AS c (identity, state, n)
    SELECT identity, state, sum(n) FROM d GROUP BY identity, state
    ON CONFLICT (identity, state) DO UPDATE SET n = c.n + excluded.n;
    WITH d AS (DELETE FROM counter_deltas RETURNING name, n)
    INSERT INTO counters AS c (name, n)
    SELECT name, sum(n) FROM d GROUP BY name
    ON CONFLICT (name) DO UPDATE SET n = c.n + excluded.n;
END $$;

-- count_delta adds n to the counter name (the row triggers' way: each
-- fires for a row of a rare class, or once per challenge).
CREATE FUNCTION count_delta(p_name text, p_n bigint) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_seq bigint;
BEGIN
    INSERT INTO counter_deltas (name, n) VALUES (p_name, p_n) RETURNING seq INTO v_seq;
    IF v_seq % 1024 = 0 THEN
        PERFORM fold_counts();
    END IF;
END $$;

-- Messages change state on every hot path (a drain's claim and outcome,
-- a webhook status, reconcile), in batches: one trigger per statement,
-- over its transition tables, so that a batch of a thousand rows costs
-- one call and a row per (identity, state) it changed, not a call per
-- row. The same pass counts resends and rows flagged maybe_sent by state.
CREATE FUNCTION messages_counts_insert() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_fold boolean;
BEGIN
    WITH d AS (
        INSERT INTO state_count_deltas (identity, state, n)
        SELECT identity, state, count(*) FROM new_rows GROUP BY identity, state
        RETURNING seq)
    SELECT coalesce(bool_or(seq % 1024 = 0), false) INTO v_fold FROM d;
    IF EXISTS (SELECT 1 FROM new_rows WHERE maybe_sent OR resend_of <> '' OR provider_id_collision <> '') THEN
        INSERT INTO counter_deltas (name, n)
        SELECT name, count(*) FROM (
            SELECT 'maybe_sent:' || state AS name FROM new_rows WHERE maybe_sent
            UNION ALL SELECT 'resends' FROM new_rows WHERE resend_of <> ''
            UNION ALL SELECT 'provider_id_collisions' FROM new_rows WHERE provider_id_collision <> '') c
        GROUP BY name;
    END IF;
    IF v_fold THEN
        PERFORM fold_counts();
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION messages_counts_update() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_fold boolean;
BEGIN
    WITH d AS (
        INSERT INTO state_count_deltas (identity, state, n)
        SELECT identity, state, sum(n) FROM (
            SELECT identity, state, 1 AS n FROM new_rows
            UNION ALL SELECT identity, state, -1 FROM old_rows) c
        GROUP BY identity, state HAVING sum(n) <> 0
        RETURNING seq)
    SELECT coalesce(bool_or(seq % 1024 = 0), false) INTO v_fold FROM d;
    IF EXISTS (SELECT 1 FROM new_rows WHERE maybe_sent OR resend_of <> '' OR provider_id_collision <> '')
       OR EXISTS (SELECT 1 FROM old_rows WHERE maybe_sent OR resend_of <> '' OR provider_id_collision <> '') THEN
        INSERT INTO counter_deltas (name, n)
        SELECT name, sum(n) FROM (
            SELECT 'maybe_sent:' || state AS name, 1 AS n FROM new_rows WHERE maybe_sent
            UNION ALL SELECT 'maybe_sent:' || state, -1 FROM old_rows WHERE maybe_sent
            UNION ALL SELECT 'resends', 1 FROM new_rows WHERE resend_of <> ''
            UNION ALL SELECT 'resends', -1 FROM old_rows WHERE resend_of <> ''
            UNION ALL SELECT 'provider_id_collisions', 1 FROM new_rows WHERE provider_id_collision <> ''
            UNION ALL SELECT 'provider_id_collisions', -1 FROM old_rows WHERE provider_id_collision <> '') c
        GROUP BY name HAVING sum(n) <> 0;
    END IF;
    IF v_fold THEN
        PERFORM fold_counts();
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION messages_counts_delete() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO state_count_deltas (identity, state, n)
    SELECT identity, state, -count(*) FROM old_rows GROUP BY identity, state;
    INSERT INTO counter_deltas (name, n)
    SELECT name, -count(*) FROM (
        SELECT 'maybe_sent:' || state AS name FROM old_rows WHERE maybe_sent
        UNION ALL SELECT 'resends' FROM old_rows WHERE resend_of <> ''
        UNION ALL SELECT 'provider_id_collisions' FROM old_rows WHERE provider_id_collision <> '') c
    GROUP BY name;
    RETURN NULL;
END $$;

-- The counts start from the rows there are, counted while writers wait.
LOCK TABLE messages, challenges, challenge_steps, events, evidence, inbound, webhook_events, notices IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER messages_counts_insert AFTER INSERT ON messages REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION messages_counts_insert();
CREATE TRIGGER messages_counts_update AFTER UPDATE ON messages REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION messages_counts_update();
CREATE TRIGGER messages_counts_delete AFTER DELETE ON messages REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION messages_counts_delete();

-- Challenges change once or twice each (created, then ended), a row at a
-- time: row triggers, each firing only when a counted column changed.
CREATE FUNCTION challenge_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.outcome <> 'open' THEN
            PERFORM count_delta('challenges:' || OLD.outcome || ':' || OLD.by_step, -1);
        END IF;
        IF OLD.supersedes <> '' THEN
            PERFORM count_delta('superseding_sends', -1);
        END IF;
    END IF;
    IF NEW.outcome <> 'open' THEN
        PERFORM count_delta('challenges:' || NEW.outcome || ':' || NEW.by_step, 1);
    END IF;
    IF NEW.supersedes <> '' THEN
        PERFORM count_delta('superseding_sends', 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER challenge_counts_insert AFTER INSERT ON challenges FOR EACH ROW
    WHEN (NEW.outcome <> 'open' OR NEW.supersedes <> '') EXECUTE FUNCTION challenge_counts();
CREATE TRIGGER challenge_counts_update AFTER UPDATE ON challenges FOR EACH ROW
    WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.by_step IS DISTINCT FROM NEW.by_step
          OR OLD.supersedes IS DISTINCT FROM NEW.supersedes) EXECUTE FUNCTION challenge_counts();

-- A later step released is a fallback fired.
CREATE FUNCTION challenge_step_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.step > 1 AND OLD.released THEN
            PERFORM count_delta('fallbacks_fired', -1);
        END IF;
    END IF;
    IF NEW.step > 1 AND NEW.released THEN
        PERFORM count_delta('fallbacks_fired', 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER challenge_step_counts_insert AFTER INSERT ON challenge_steps FOR EACH ROW
    WHEN (NEW.step > 1 AND NEW.released) EXECUTE FUNCTION challenge_step_counts();
CREATE TRIGGER challenge_step_counts_update AFTER UPDATE ON challenge_steps FOR EACH ROW
    WHEN ((OLD.step > 1 AND OLD.released) IS DISTINCT FROM (NEW.step > 1 AND NEW.released)) EXECUTE FUNCTION challenge_step_counts();

-- Events whose endpoint gave up (dead): few, until purged or retried.
-- Events are written by every status change's trigger; these fire only
-- for a dead one.
CREATE FUNCTION event_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.dead_at IS NOT NULL THEN
            PERFORM count_delta('dead_events', -1);
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.dead_at IS NOT NULL THEN
            PERFORM count_delta('dead_events', 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER event_counts_insert AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.dead_at IS NOT NULL) EXECUTE FUNCTION event_counts();
CREATE TRIGGER event_counts_update AFTER UPDATE ON events FOR EACH ROW
    WHEN ((OLD.dead_at IS NULL) <> (NEW.dead_at IS NULL)) EXECUTE FUNCTION event_counts();
CREATE TRIGGER event_counts_delete AFTER DELETE ON events FOR EACH ROW
    WHEN (OLD.dead_at IS NOT NULL) EXECUTE FUNCTION event_counts();

-- Parked statuses (pending: every status is, until applied) and replies
-- linked to no message: written in batches by the webhook processor, so
-- one trigger per statement.
CREATE FUNCTION evidence_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_parked bigint := 0;
    v_suspect bigint := 0;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT v_parked + count(*) FILTER (WHERE outcome = ''), v_suspect + count(*) FILTER (WHERE outcome = 'suspect')
        INTO v_parked, v_suspect FROM new_rows;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT v_parked - count(*) FILTER (WHERE outcome = ''), v_suspect - count(*) FILTER (WHERE outcome = 'suspect')
        INTO v_parked, v_suspect FROM old_rows;
    END IF;
    IF v_parked <> 0 THEN
        PERFORM count_delta('parked_evidence', v_parked);
    END IF;
    IF v_suspect <> 0 THEN
        PERFORM count_delta('suspect_evidence', v_suspect);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER evidence_counts_insert AFTER INSERT ON evidence REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_counts();
CREATE TRIGGER evidence_counts_update AFTER UPDATE ON evidence REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_counts();
CREATE TRIGGER evidence_counts_delete AFTER DELETE ON evidence REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_counts();

CREATE FUNCTION inbound_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_n bigint := 0;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        v_n := v_n + (SELECT count(*) FROM new_rows WHERE message_id IS NULL);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        v_n := v_n - (SELECT count(*) FROM old_rows WHERE message_id IS NULL);
    END IF;
    IF v_n <> 0 THEN
        PERFORM count_delta('unattributed_inbound', v_n);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER inbound_counts_insert AFTER INSERT ON inbound REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbound_counts();
CREATE TRIGGER inbound_counts_update AFTER UPDATE ON inbound REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbound_counts();
CREATE TRIGGER inbound_counts_delete AFTER DELETE ON inbound REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbound_counts();

-- Deliveries processed with an error (unreadable: kept for a person, or
-- a fixed parser, never purged) and provider notices: row triggers, each
-- firing only for a row of its class (a delivery's body is never copied
-- into a transition table).
CREATE FUNCTION webhook_event_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.error <> '' THEN
            PERFORM count_delta('unreadable_webhooks', -1);
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.error <> '' THEN
            PERFORM count_delta('unreadable_webhooks', 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER webhook_event_counts_insert AFTER INSERT ON webhook_events FOR EACH ROW
    WHEN (NEW.error <> '') EXECUTE FUNCTION webhook_event_counts();
CREATE TRIGGER webhook_event_counts_update AFTER UPDATE ON webhook_events FOR EACH ROW
    WHEN ((OLD.error <> '') <> (NEW.error <> '')) EXECUTE FUNCTION webhook_event_counts();
CREATE TRIGGER webhook_event_counts_delete AFTER DELETE ON webhook_events FOR EACH ROW
    WHEN (OLD.error <> '') EXECUTE FUNCTION webhook_event_counts();

CREATE FUNCTION notice_counts() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM count_delta('notices', -1);
        IF OLD.kind = 'unknown' THEN
            PERFORM count_delta('unknown_notices', -1);
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM count_delta('notices', 1);
        IF NEW.kind = 'unknown' THEN
            PERFORM count_delta('unknown_notices', 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER notice_counts_insert AFTER INSERT ON notices FOR EACH ROW EXECUTE FUNCTION notice_counts();
CREATE TRIGGER notice_counts_update AFTER UPDATE ON notices FOR EACH ROW
    WHEN (OLD.kind IS DISTINCT FROM NEW.kind) EXECUTE FUNCTION notice_counts();
CREATE TRIGGER notice_counts_delete AFTER DELETE ON notices FOR EACH ROW EXECUTE FUNCTION notice_counts();

INSERT INTO state_counts (identity, state, n)
SELECT identity, state, count(*) FROM messages GROUP BY identity, state;

INSERT INTO counters (name, n)
SELECT name, n FROM (
    SELECT 'resends', count(*) FROM messages WHERE resend_of <> ''
    UNION ALL SELECT 'maybe_sent:' || state, count(*) FROM messages WHERE maybe_sent GROUP BY state
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
) c (name, n)
WHERE n > 0
ON CONFLICT (name) DO UPDATE SET n = excluded.n;

-- 2. Windows. Resends made within the window, by creation; challenges
-- that expired within it, by deadline.
CREATE INDEX messages_resends_created ON messages (created_at) WHERE resend_of <> '';
CREATE INDEX challenges_expired ON challenges (deadline) WHERE outcome = 'expired';

-- 3. Retries on a schedule. A status whose message is not known yet
-- (parked), or a reply whose context is no message's provider id yet, is
-- tried again when retry_at comes: at once when new, then after an
-- eighth of its age each time it still matches nothing (the webhook
-- processor sets it). A status the drain races is applied within
-- moments; one parked for a month, within days of its message being
-- known; and each round reads only what is due, never every status
-- parked since the store was made (statuses of messages some other
-- system sent through the same number are parked for ever).
--
-- The indexes are on an expression, coalesce(retry_at, '-infinity') (the
-- column itself: it is never null), so that ANALYZE keeps statistics of
-- the rows they hold alone (those of a partial index's expressions come
-- from its own rows): the column's statistics are those of every status
-- ever applied and every reply ever linked, whose retry_at no longer
-- means anything, and would have the planner believe most parked rows
-- due and read them all.
ALTER TABLE evidence ADD COLUMN retry_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX evidence_retry ON evidence ((coalesce(retry_at, '-infinity'::timestamptz)), at, id) WHERE outcome = '';
ALTER TABLE inbound ADD COLUMN retry_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX inbound_retry ON inbound ((coalesce(retry_at, '-infinity'::timestamptz)), id) WHERE message_id IS NULL AND context_id <> '';

-- What is parked at the upgrade was tried now: due again an eighth of its
-- age from now, so that the first rounds after it read what comes, not
-- the whole backlog at once.
UPDATE evidence SET retry_at = clock_timestamp() + greatest(clock_timestamp() - received_at, interval '0') / 8 WHERE outcome = '';
UPDATE inbound SET retry_at = clock_timestamp() + greatest(clock_timestamp() - stored_at, interval '0') / 8
WHERE message_id IS NULL AND context_id <> '';
