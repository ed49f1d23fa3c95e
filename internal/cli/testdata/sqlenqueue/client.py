"""An application enqueuing through msgq's SQL function with psycopg2
(docs/sql-enqueue.md), as TestSQLEnqueueFromPsqlAndPython runs it:
python3 client.py DSN SCHEMA. It prints one JSON object of what it saw."""
import json
import sys

import psycopg2
from psycopg2 import sql

dsn, schema = sys.argv[1], sys.argv[2]
enqueue = sql.SQL("SELECT {}.enqueue(key => %s, to_addr => %s, region => %s, text => %s)").format(sql.Identifier(schema))
out = {}
conn = psycopg2.connect(dsn)

# The application's own transaction: its order row and the message commit together.
with conn:
    with conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE orders (id int)")
        cur.execute("INSERT INTO orders VALUES (1001)")
        cur.execute(enqueue, ("py-1001", "(555) 123-4599", "US", "your order 1001 shipped"))
        out["id"] = cur.fetchone()[0]

# A rolled-back transaction leaves no message.
try:
    with conn:
        with conn.cursor() as cur:
            cur.execute(enqueue, ("py-rolled-back", "+15551234599", None, "never sent"))
            out["rolled_back_id"] = cur.fetchone()[0]
            raise RuntimeError("the application changes its mind")
except RuntimeError:
    pass

# A replay is the same call again: the id, nothing written.
with conn:
    with conn.cursor() as cur:
        cur.execute(enqueue, ("py-1001", "(555) 123-4599", "US", "your order 1001 shipped"))
        out["replay_id"] = cur.fetchone()[0]

# A number enqueue() cannot judge is taken in; the admission fails it.
with conn:
    with conn.cursor() as cur:
        cur.execute(enqueue, ("py-bad-number", "12", "US", "hi"))
        out["bad_number_id"] = cur.fetchone()[0]

for name, args in [("conflict", ("py-1001", "+15551234599", None, "other content")),
                   ("reformatted", ("py-1001", "+1 555 123 4599", None, "your order 1001 shipped")),
                   ("invalid", ("py bad", "+15551234599", None, "hi"))]:
    try:
        with conn:
            with conn.cursor() as cur:
                cur.execute(enqueue, args)
        out[name] = {"error": None}
    except psycopg2.Error as e:
        out[name] = {"sqlstate": e.pgcode, "detail": e.diag.message_detail, "column": e.diag.column_name,
                     "message": e.diag.message_primary}
conn.close()
print(json.dumps(out))
