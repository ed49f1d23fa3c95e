-- Nothing: PostgreSQL's 0020 applies quiet hours in its enqueue()
-- function as msgq send does (docs/sql-enqueue.md); SQLite has no such
-- function. The number is kept so that both stores' migrations carry the
-- same numbers.
SELECT 1;
