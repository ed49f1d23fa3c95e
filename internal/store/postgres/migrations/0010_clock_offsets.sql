-- Each drain, reconcile and webhook serve measures its host's clock against
-- the database server's (every shared decision is made on the server's
-- clock) and records the last measurement here, one row per process, so
-- that stats and health can show the largest recent offset. measured_at is
-- the server's time of the measurement; rows of processes that stopped age
-- out of the figure and are deleted a day later by the next writer.
CREATE TABLE clock_offsets (
    process     text PRIMARY KEY,
    host        text NOT NULL,
    role        text NOT NULL,
    offset_us   bigint NOT NULL,
    rtt_us      bigint NOT NULL,
    measured_at timestamptz NOT NULL
);
CREATE INDEX clock_offsets_measured ON clock_offsets (measured_at);
