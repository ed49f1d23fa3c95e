-- Superseded by 0026_sql_intake.sql: this was the first version of the
-- enqueue() function (msgq send written again in PL/pgSQL, with the phone
-- library's metadata in tables). 0026 drops what it made, so a schema that
-- ran it and one that did not end the same; the text as released is kept in
-- testdata/released/ for the upgrade tests (upgrade_test.go).
SELECT 1;
