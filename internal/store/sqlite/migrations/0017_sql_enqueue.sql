-- Nothing: PostgreSQL's 0017 installs enqueue(), the SQL function an
-- application calls inside its own transaction (docs/sql-enqueue.md);
-- SQLite has no such function. The number is kept so that both stores'
-- migrations carry the same numbers.
SELECT 1;
