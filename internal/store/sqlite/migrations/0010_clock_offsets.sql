-- Nothing here: every process of a SQLite store runs on the host whose
-- clock it uses, so there are no clock offsets to record (PostgreSQL's
-- 0010 keeps them). The number is kept so that one change carries one
-- number on both stores (docs/operations.md, "Schema versions").
SELECT 1;
