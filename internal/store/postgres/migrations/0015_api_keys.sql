-- API keys of `msgq serve` (docs/api.md). Only the SHA-256 of a key's token
-- is kept: the token is printed once by `msgq api-keys create`. A name is
-- unique among the keys not revoked, so that revoking by name means one key.
CREATE TABLE api_keys (
    id           text        NOT NULL PRIMARY KEY, -- ULID
    tenant       text        NOT NULL,
    name         text        NOT NULL,
    hash         text        NOT NULL UNIQUE,      -- hex SHA-256 of the token
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz,                      -- NULL: in force
    last_used_at timestamptz                       -- NULL: never used
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys (name) WHERE revoked_at IS NULL;
