-- The history_events trigger of 0016 read its transition table in a join
-- the planner could not plan well: a transition table has no statistics,
-- so it is estimated at one row, and the planner walked every row of
-- messages against the batch's history rows (3.8 million pairs for 189
-- rows over 20,000 messages; 595 ms of a 618 ms outcome write), on every
-- statement that writes history, claims included, and with no endpoint
-- at all. The drain then slowed as finished rows piled up.
--
-- This version has one plan whatever the estimates say: each history row
-- reads its message by primary key and its challenge step by its unique
-- message id (LATERAL, so the history row is always the outer side), so a
-- statement costs in proportion to its history rows, never to the table.
-- And a store with no enabled endpoint (most) returns before the join.
-- internal/drain/scale_test.go counts the database's work per drained
-- message at two table sizes to keep it so.
CREATE OR REPLACE FUNCTION history_events() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM endpoints WHERE disabled_at IS NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO events (endpoint_id, tenant, subject, message_id, challenge_id, type, payload, created_at, next_at)
    SELECT e.id, m.tenant, m.id, m.id, coalesce(c.id, ''), 'message.' || h.to_state,
           json_build_object('message_id', m.id, 'key', m.key, 'tenant', m.tenant, 'state', h.to_state,
                             'reason', h.reason, 'provider_id', m.provider_id, 'channel', m.channel,
                             'to', m.recipient, 'challenge_id', coalesce(c.id, ''), 'challenge_key', coalesce(c.key, ''))::text,
           h.at, h.at
    FROM new_history h
    CROSS JOIN LATERAL (SELECT m.id, m.tenant, m.key, m.provider_id, m.channel, m.recipient
                        FROM messages m WHERE m.id = h.message_id OFFSET 0) m
    JOIN endpoints e ON e.tenant = m.tenant AND e.disabled_at IS NULL
    LEFT JOIN LATERAL (SELECT c.id, c.key FROM challenge_steps cs JOIN challenges c ON c.id = cs.challenge_id
                       WHERE cs.message_id = m.id OFFSET 0) c ON true
    WHERE h.applied AND h.from_state <> h.to_state
      AND h.to_state IN ('sent', 'delivered', 'read', 'failed', 'unknown')
    ORDER BY h.message_id, h.seq, e.id;
    RETURN NULL;
END $$;

-- A challenge step's message id had the database's default collation,
-- and messages.id has "C": a comparison of the two could not use
-- challenge_steps' unique index on it, so every look-up of a message's
-- step (the trigger above, a challenge tick's join) read challenge_steps
-- whole. The same collation on both sides makes them index look-ups.
ALTER TABLE challenge_steps ALTER COLUMN message_id TYPE text COLLATE "C";

-- Each identity's count of recipients in daily_recipients, kept by the
-- claims that add and drop them (internal/store/postgres/daily.go): a
-- claim under a daily limit read it with a count(*) over the day's
-- recipients, up to a whole messaging tier (100,000) on every claim.
CREATE TABLE daily_counts (
    identity   text   NOT NULL PRIMARY KEY,
    recipients bigint NOT NULL
);
INSERT INTO daily_counts (identity, recipients)
SELECT identity, count(*) FROM daily_recipients GROUP BY identity;

-- The triggers' statements are a few look-ups by key; JIT compilation
-- never pays for them, and it ran whenever a caller's planner settings
-- priced them high (a claim turns sorts off, which prices the trigger's
-- ORDER BY at about 1e10): 1 to 2 s of LLVM work per claim once an event
-- endpoint existed. A function's SET holds while it runs, whoever calls.
ALTER FUNCTION history_events() SET jit = off;
ALTER FUNCTION challenge_events() SET jit = off;
