-- Rows the drain held because the recipient's customer-service window was
-- closed (last_error is store.WindowHeld). An inbound message releases
-- them in its ingest transaction; this index keeps that update to the held
-- rows of one identity and recipient, never a walk of messages. The
-- statement repeats the predicate literally, as SQLite uses a partial
-- index only then.
CREATE INDEX messages_window_held ON messages (identity, recipient)
    WHERE state = 'queued' AND last_error = 'customer-service window closed: free-form text held';
