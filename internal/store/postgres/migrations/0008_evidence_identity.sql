-- Evidence lands only on the message it is about: provider ids are unique
-- per identity (two numbers, an http provider and a simulator all issue
-- their own ids, and may issue the same one), statuses and replies are
-- matched by (identity, provider id), and a status whose own reference or
-- recipient disagrees with the row is set aside as suspect.

-- Rows that shared (identity, provider_id) with another row before this
-- migration, or that a provider later gave an id another row of the same
-- identity already had, carry their own id here; every other row has ''.
-- So the unique index below holds for all rows without refusing the
-- migration or a drain's record of an accepted send, and the colliding
-- rows stay listed (msgq webhook suspect, msgq migrate) for a person:
-- evidence naming such an id is never applied to either row.
ALTER TABLE messages ADD COLUMN provider_id_collision text NOT NULL DEFAULT '';
UPDATE messages m SET provider_id_collision = m.id
WHERE m.provider_id <> '' AND EXISTS (SELECT 1 FROM messages y
    WHERE y.provider_id = m.provider_id AND y.provider_id <> '' AND y.identity = m.identity AND y.id <> m.id);
CREATE UNIQUE INDEX messages_identity_provider_id ON messages (identity, provider_id, provider_id_collision)
    WHERE provider_id <> '';
-- The colliding rows, for their listing.
CREATE INDEX messages_provider_id_collision ON messages (identity, provider_id) WHERE provider_id_collision <> '';
DROP INDEX messages_provider_id;

-- The recipient a status names (WhatsApp's recipient_id, the http API's
-- "to"), E.164 with the plus, '' when none; and why a status was set aside
-- (outcome 'suspect'), '' otherwise.
ALTER TABLE evidence ADD COLUMN recipient text NOT NULL DEFAULT '';
ALTER TABLE evidence ADD COLUMN suspect text NOT NULL DEFAULT '';
CREATE INDEX evidence_suspect ON evidence (received_at, id) WHERE outcome = 'suspect';
CREATE INDEX evidence_pending_provider ON evidence (identity, provider_id) WHERE outcome = '';

-- What customers answered to one message (replies, reactions), for msgq show.
CREATE INDEX inbound_message ON inbound (message_id, received_at, id) WHERE message_id IS NOT NULL;

-- Deduplication is per identity too: two numbers' providers may send the
-- same wamid, status and second, or the same inbound id, and each is news.
DROP INDEX evidence_dedupe;
CREATE UNIQUE INDEX evidence_dedupe ON evidence (provider, identity, dedupe_key);
DROP INDEX inbound_provider_message;
CREATE UNIQUE INDEX inbound_provider_message ON inbound (provider, identity, provider_message_id);
