-- API keys of `msgq serve` (docs/api.md). Only the SHA-256 of a key's token
-- is kept: the token is printed once by `msgq api-keys create`. A name is
-- unique among the keys not revoked, so that revoking by name means one key.
CREATE TABLE api_keys (
    id           TEXT    NOT NULL PRIMARY KEY, -- ULID
    tenant       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    hash         TEXT    NOT NULL UNIQUE,      -- hex SHA-256 of the token
    created_at   INTEGER NOT NULL,             -- Unix microseconds
    revoked_at   INTEGER,                      -- Unix microseconds; NULL: in force
    last_used_at INTEGER                       -- Unix microseconds; NULL: never used
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys (name) WHERE revoked_at IS NULL;
