-- Status events back to the application (docs/events.md): a tenant's
-- endpoints, and a durable outbox of signed events to them. Events are
-- written by triggers in the transaction of the change itself, so that
-- every writer (each store's Go code, and whatever else inserts history
-- rows) writes them, and a change that rolls back writes none.
CREATE TABLE endpoints (
    id                   TEXT    NOT NULL PRIMARY KEY, -- ep_...
    tenant               TEXT    NOT NULL,
    url                  TEXT    NOT NULL,
    secret               TEXT    NOT NULL,             -- whsec_...: the signing secret
    created_at           INTEGER NOT NULL,             -- Unix microseconds
    disabled_at          INTEGER,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_error           TEXT    NOT NULL DEFAULT '',
    last_success_at      INTEGER,
    last_failure_at      INTEGER
);
CREATE INDEX endpoints_tenant ON endpoints (tenant) WHERE disabled_at IS NULL;

-- One row per event and endpoint. subject orders a message's (or a
-- challenge's) events: only the oldest undelivered one of a subject and
-- endpoint is claimable, so they arrive in order and one at a time.
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE DEFAULT ('evt_' || lower(hex(randomblob(16)))),
    endpoint_id  TEXT    NOT NULL,
    tenant       TEXT    NOT NULL,
    subject      TEXT    NOT NULL,
    message_id   TEXT    NOT NULL DEFAULT '',
    challenge_id TEXT    NOT NULL DEFAULT '',
    type         TEXT    NOT NULL, -- message.sent, ..., challenge.completed, challenge.expired
    payload      TEXT    NOT NULL, -- the event's data object, JSON
    created_at   INTEGER NOT NULL, -- Unix microseconds: the change's time
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    lease_owner  TEXT    NOT NULL DEFAULT '',
    lease_until  INTEGER,
    delivered_at INTEGER,
    dead_at      INTEGER,
    last_error   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX events_due ON events (next_at, seq) WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX events_subject ON events (endpoint_id, subject, seq) WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX events_endpoint ON events (endpoint_id, dead_at);

-- An applied change of a message into a state the application cares about.
CREATE TRIGGER history_events AFTER INSERT ON history
WHEN NEW.applied = 1 AND NEW.from_state <> NEW.to_state
     AND NEW.to_state IN ('sent', 'delivered', 'read', 'failed', 'unknown')
BEGIN
    INSERT INTO events (endpoint_id, tenant, subject, message_id, challenge_id, type, payload, created_at, next_at)
    SELECT e.id, m.tenant, m.id, m.id, coalesce(c.id, ''), 'message.' || NEW.to_state,
           json_object('message_id', m.id, 'key', m.key, 'tenant', m.tenant, 'state', NEW.to_state,
                       'reason', NEW.reason, 'provider_id', m.provider_id, 'channel', m.channel,
                       'to', m.recipient, 'challenge_id', coalesce(c.id, ''), 'challenge_key', coalesce(c.key, '')),
           NEW.at, NEW.at
    FROM messages m
    JOIN endpoints e ON e.tenant = m.tenant AND e.disabled_at IS NULL
    LEFT JOIN challenge_steps cs ON cs.message_id = m.id
    LEFT JOIN challenges c ON c.id = cs.challenge_id
    WHERE m.id = NEW.message_id
    ORDER BY e.id;
END;

-- A challenge that ended the way the application waits for.
CREATE TRIGGER challenge_events AFTER UPDATE OF outcome ON challenges
WHEN NEW.outcome IN ('completed', 'expired') AND OLD.outcome <> NEW.outcome
BEGIN
    INSERT INTO events (endpoint_id, tenant, subject, challenge_id, message_id, type, payload, created_at, next_at)
    SELECT e.id, NEW.tenant, NEW.id, NEW.id, coalesce(cs.message_id, ''), 'challenge.' || NEW.outcome,
           json_object('challenge_id', NEW.id, 'challenge_key', NEW.key, 'tenant', NEW.tenant, 'outcome', NEW.outcome,
                       'by_step', NEW.by_step, 'message_id', coalesce(cs.message_id, ''), 'why', NEW.why),
           NEW.updated_at, NEW.updated_at
    FROM endpoints e
    LEFT JOIN challenge_steps cs ON cs.challenge_id = NEW.id AND cs.step = NEW.by_step
    WHERE e.tenant = NEW.tenant AND e.disabled_at IS NULL
    ORDER BY e.id;
END;
