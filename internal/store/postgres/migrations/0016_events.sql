-- Status events back to the application (docs/events.md): a tenant's
-- endpoints, and a durable outbox of signed events to them. Events are
-- written by triggers in the transaction of the change itself, so that
-- every writer (the store's Go code, the enqueue SQL function, anything
-- else that inserts history rows) writes them, and a change that rolls
-- back writes none.
CREATE TABLE endpoints (
    id                   text COLLATE "C" NOT NULL PRIMARY KEY, -- ep_...
    tenant               text COLLATE "C" NOT NULL,
    url                  text        NOT NULL,
    secret               text        NOT NULL,                 -- whsec_...: the signing secret
    created_at           timestamptz NOT NULL,
    disabled_at          timestamptz,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    last_error           text        NOT NULL DEFAULT '',
    last_success_at      timestamptz,
    last_failure_at      timestamptz
);
CREATE INDEX endpoints_tenant ON endpoints (tenant) WHERE disabled_at IS NULL;

-- One row per event and endpoint. subject orders a message's (or a
-- challenge's) events: only the oldest undelivered one of a subject and
-- endpoint is claimable, so they arrive in order and one at a time. A
-- message's changes are serialized by its row lock, so their seqs are in
-- commit order.
CREATE TABLE events (
    seq          bigserial   PRIMARY KEY,
    id           text COLLATE "C" NOT NULL UNIQUE DEFAULT ('evt_' || replace(gen_random_uuid()::text, '-', '')),
    endpoint_id  text COLLATE "C" NOT NULL,
    tenant       text COLLATE "C" NOT NULL,
    subject      text COLLATE "C" NOT NULL,
    message_id   text COLLATE "C" NOT NULL DEFAULT '',
    challenge_id text COLLATE "C" NOT NULL DEFAULT '',
    type         text        NOT NULL, -- message.sent, ..., challenge.completed, challenge.expired
    payload      text        NOT NULL, -- the event's data object, JSON
    created_at   timestamptz NOT NULL, -- the change's time
    attempts     integer     NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL,
    lease_owner  text        NOT NULL DEFAULT '',
    lease_until  timestamptz,
    delivered_at timestamptz,
    dead_at      timestamptz,
    last_error   text        NOT NULL DEFAULT ''
);
CREATE INDEX events_due ON events (next_at, seq) WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX events_subject ON events (endpoint_id, subject, seq) WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX events_endpoint ON events (endpoint_id, dead_at);

-- A statement-level trigger with a transition table: a drain's batch of
-- history rows costs one INSERT ... SELECT, not a function call per row.
-- The functions keep the migration's search_path (msgq's schema), so that
-- a writer whose session has another one (an application calling the
-- enqueue function) still finds msgq's tables.
CREATE FUNCTION history_events() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (endpoint_id, tenant, subject, message_id, challenge_id, type, payload, created_at, next_at)
    SELECT e.id, m.tenant, m.id, m.id, coalesce(c.id, ''), 'message.' || h.to_state,
           json_build_object('message_id', m.id, 'key', m.key, 'tenant', m.tenant, 'state', h.to_state,
                             'reason', h.reason, 'provider_id', m.provider_id, 'channel', m.channel,
                             'to', m.recipient, 'challenge_id', coalesce(c.id, ''), 'challenge_key', coalesce(c.key, ''))::text,
           h.at, h.at
    FROM new_history h
    JOIN messages m ON m.id = h.message_id
    JOIN endpoints e ON e.tenant = m.tenant AND e.disabled_at IS NULL
    LEFT JOIN challenge_steps cs ON cs.message_id = m.id
    LEFT JOIN challenges c ON c.id = cs.challenge_id
    WHERE h.applied AND h.from_state <> h.to_state
      AND h.to_state IN ('sent', 'delivered', 'read', 'failed', 'unknown')
    ORDER BY h.message_id, h.seq, e.id;
    RETURN NULL;
END $$;
CREATE TRIGGER history_events AFTER INSERT ON history
REFERENCING NEW TABLE AS new_history
FOR EACH STATEMENT EXECUTE FUNCTION history_events();

CREATE FUNCTION challenge_events() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO events (endpoint_id, tenant, subject, challenge_id, message_id, type, payload, created_at, next_at)
    SELECT e.id, NEW.tenant, NEW.id, NEW.id, coalesce(cs.message_id, ''), 'challenge.' || NEW.outcome,
           json_build_object('challenge_id', NEW.id, 'challenge_key', NEW.key, 'tenant', NEW.tenant, 'outcome', NEW.outcome,
                             'by_step', NEW.by_step, 'message_id', coalesce(cs.message_id, ''), 'why', NEW.why)::text,
           NEW.updated_at, NEW.updated_at
    FROM endpoints e
    LEFT JOIN challenge_steps cs ON cs.challenge_id = NEW.id AND cs.step = NEW.by_step
    WHERE e.tenant = NEW.tenant AND e.disabled_at IS NULL
    ORDER BY e.id;
    RETURN NULL;
END $$;
CREATE TRIGGER challenge_events AFTER UPDATE OF outcome ON challenges
FOR EACH ROW WHEN (NEW.outcome IN ('completed', 'expired') AND OLD.outcome IS DISTINCT FROM NEW.outcome)
EXECUTE FUNCTION challenge_events();
