-- Rows the drain held because the recipient's customer-service window was
-- closed (last_error is store.WindowHeld). An inbound message releases
-- them in its ingest transaction; this index keeps that update to the held
-- rows of one identity and recipient, never a walk of messages. The
-- statement repeats the predicate literally, so that even a generic plan
-- of it can use the partial index.
CREATE INDEX messages_window_held ON messages (identity, recipient)
    WHERE state = 'queued' AND last_error = 'customer-service window closed: free-form text held';

-- Retention of webhook data (WebhookPurge) and the unreadable figure
-- (WebhookStats). The statements repeat each predicate literally, so that
-- the planner can prove the partial index applies to any plan of them and
-- no purge batch or count walks a whole table.
--
-- Events read without an error: the only ones retention may delete,
-- oldest first. An event enters when ingest marks it processed and leaves
-- when purged, so the index holds what retention has yet to drop.
CREATE INDEX webhook_events_done ON webhook_events (received_at, id)
    WHERE processed_at IS NOT NULL AND error = '';
-- Events processed with an error (only processing sets error): the few
-- deliveries processing could not read (in whole or in part), which a person
-- must look at.
CREATE INDEX webhook_events_unreadable ON webhook_events (received_at, id) WHERE error <> '';
-- Inbound messages still holding what the customer wrote: a purged one
-- (text and reply_title blanked) leaves the index, so it is not counted or
-- visited again.
CREATE INDEX inbound_text ON inbound (stored_at, id) WHERE text <> '' OR reply_title <> '';
