-- Nothing here: PostgreSQL's 0001 already holds the drain's tables
-- (identities, pacing), which SQLite adds in its 0002. The number is kept
-- so that one change carries one number on both stores
-- (docs/operations.md, "Schema versions").
SELECT 1;
