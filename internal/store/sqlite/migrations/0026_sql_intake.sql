-- Nothing: PostgreSQL's 0026 makes its enqueue() function a thin intake
-- (docs/sql-enqueue.md); SQLite has no such function. The number is kept so
-- that both stores' migrations carry the same numbers.
SELECT 1;
