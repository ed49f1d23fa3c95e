-- The claim's and stats' walks of the queue, and stats' count of expired
-- leases, answered from the indexes alone: a paused identity's backlog, or
-- many rows in flight, otherwise cost a heap fetch per entry.
DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (lane DESC, next_attempt_at, id) INCLUDE (identity, expires_at) WHERE state = 'queued';
DROP INDEX messages_in_flight;
CREATE INDEX messages_in_flight ON messages (updated_at) INCLUDE (state, lease_until) WHERE state IN ('sending', 'unknown');
