-- Nothing: PostgreSQL's 0019 brings its enqueue() function closer to
-- msgq send (docs/sql-enqueue.md); SQLite has no such function. The
-- number is kept so that both stores' migrations carry the same numbers.
SELECT 1;
