package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestScratchPlans(t *testing.T) {
	url := testURL(t)
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{})
	ex := func(q string, args ...any) {
		if _, err := h.pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(q, err)
		}
	}
	ex(`INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, lane, state, next_attempt_at, created_at, updated_at, provider_id)
		SELECT lpad(g::text, 26, '0'), 'default', 'k'||g, 'h', '+1555', 'whatsapp', 'sim', 'bulk', 'sent', now(), now(), now(), 'wamid.'||g FROM generate_series(1, 200000) g`)
	ex(`INSERT INTO evidence (id, event_id, provider, dedupe_key, provider_id, status, at, received_at, outcome, message_id)
		SELECT lpad(g::text, 26, '0'), 'e', 'whatsapp', 'd'||g, 'wamid.'||g, 'delivered', now(), now(), 'applied', lpad(g::text, 26, '0') FROM generate_series(1, 200000) g`)
	ex(`INSERT INTO evidence (id, event_id, provider, dedupe_key, provider_id, status, at, received_at)
		SELECT 'p'||lpad(g::text, 25, '0'), 'e', 'whatsapp', 'p'||g, 'other.'||g, 'delivered', now() - interval '1 day', now() FROM generate_series(1, 5000) g`)
	ex(`INSERT INTO inbound (id, event_id, provider, provider_message_id, context_id, received_at, stored_at, message_id)
		SELECT lpad(g::text, 26, '0'), 'e', 'whatsapp', 'in'||g, CASE WHEN g % 10 = 0 THEN 'nobody.'||g ELSE '' END, now(), now(), CASE WHEN g % 2 = 0 THEN NULL ELSE 'x' END FROM generate_series(1, 100000) g`)
	ex("ANALYZE")
	for _, q := range []struct {
		q    string
		args []any
	}{
		{applyCandidatesSQL, []any{time.Now(), 1000, []string{}}},
		{attributeCandidatesSQL, nil},
		{"UPDATE inbound i SET message_id = v.mid FROM unnest($1::text[], $2::text[]) AS v(id, mid) WHERE i.id = v.id AND i.message_id IS NULL", []any{[]string{"00000000000000000000000010","00000000000000000000000020"}, []string{"a","b"}}},
		{countParkedSQL, nil},
		{"SELECT count(*) FROM inbound WHERE message_id IS NULL", nil},
		{"SELECT " + inboundCols + " FROM inbound WHERE message_id IS NULL ORDER BY received_at DESC, id DESC LIMIT 100", nil},
		{"SELECT " + evidenceCols + " FROM evidence WHERE message_id = $1 ORDER BY at, id LIMIT $2", []any{"x", 10}},
	} {
		qq := q.q
		if !strings.HasPrefix(qq, "EXPLAIN") {
			qq = "EXPLAIN (ANALYZE, COSTS OFF) " + qq
		} else {
			qq = "EXPLAIN (COSTS OFF)" + strings.TrimPrefix(qq, "EXPLAIN")
		}
		tx, _ := h.pool.Begin(ctx)
		rs, err := tx.Query(ctx, qq, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for rs.Next() {
			var l string
			rs.Scan(&l)
			lines = append(lines, l)
		}
		rs.Close()
		tx.Rollback(ctx)
		fmt.Printf("%s\n  %s\n\n", q.q[:min(80, len(q.q))], strings.Join(lines, "\n  "))
	}
}
