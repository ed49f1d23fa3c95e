-- The claim's and stats' walks of the queue, and stats' count of expired
-- leases, answered from the indexes alone (over 1,000,000 rows, a paused
-- identity's backlog cost a row lookup per entry: 21-85 ms for the oldest
-- eligible row, against 1.3 ms with these columns in the index; counting
-- expired leases read every row in flight: 54-78 ms).
DROP INDEX messages_due;
CREATE INDEX messages_due ON messages (lane DESC, next_attempt_at, id, identity, expires_at) WHERE state = 'queued';
DROP INDEX messages_in_flight;
CREATE INDEX messages_in_flight ON messages (updated_at, state, lease_until) WHERE state IN ('sending', 'unknown');
