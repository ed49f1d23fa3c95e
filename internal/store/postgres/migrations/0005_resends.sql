-- A message's resends, so that a second resend of one message (which may
-- reach the customer twice) can be noticed.
CREATE INDEX messages_resends ON messages (resend_of) WHERE resend_of <> '';
