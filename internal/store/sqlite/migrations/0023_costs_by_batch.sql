-- Nothing: PostgreSQL's 0023 makes its history_events trigger read each
-- message by key (SQLite's trigger, a row trigger, always did).
SELECT 1;
