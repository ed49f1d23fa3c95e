-- Why reconcile left an unknown row for a person (issue 24): its note, the
-- latest one, for msgq stuck (reconcile_note). Only reconcile writes it,
-- on a row still unknown, and only when it changed; the row's state, age
-- and history are untouched. '' until reconcile has seen the row. A note
-- is kept on the row rather than in its history because a history row
-- that does not change the state could take the seq that a concurrent
-- transition, already waiting on the row's lock, computed from its older
-- snapshot (a unique violation of history's key). A constant default:
-- no table rewrite.
ALTER TABLE messages ADD COLUMN reconcile_note text NOT NULL DEFAULT '';
