package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/store"
)

// TestProviderIDOwnersReadsTheIndex: reconcile asks, for each search, which
// of the listed messages other rows own. On a table of 20,000 rows with
// provider ids (and the planner's statistics taken), the statement reads
// the partial index messages_identity_provider_id, never the table
// whole: it costs the same on a queue of any size.
func TestProviderIDOwnersReadsTheIndex(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	s := open(t, url, freshSchema(t, url), Options{})
	const n = 20000
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		ps[i] = store.EnqueueParams{Key: fmt.Sprintf("k%05d", i), To: "+15551230000", Channel: store.ChannelSMS,
			Identity: []string{"sms-us", "sms-eu"}[i%2], Payload: store.Payload{Text: "hi"}}
	}
	for start := 0; start < n; start += 1000 {
		if _, err := s.MessageEnqueueMany(ctx, ps[start:start+1000]); err != nil {
			t.Fatal(err)
		}
	}
	// What accepted sends leave: a provider id on every row.
	rawTx(t, s, true, "UPDATE messages SET state = 'sent', provider_id = 'SM' || key", "ANALYZE messages")

	ids := []string{"SMk00000", "SMk00001", "SMk00002", "SMnone"}
	os, err := s.MessageProviderIDOwners(ctx, "sms-us", ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(os) != 2 || os[0].Key != "k00000" || os[1].Key != "k00002" {
		t.Errorf("owners %+v, want k00000 and k00002 (sms-us's)", os)
	}
	rs, err := s.pool.Query(ctx, "EXPLAIN "+ownersSQL, "sms-us", ids)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	p := strings.Join(plan, "\n")
	if !strings.Contains(p, "messages_identity_provider_id") || strings.Contains(p, "Seq Scan") {
		t.Errorf("plan of the owners statement:\n%s\nwant a read of messages_identity_provider_id and no sequential scan", p)
	} else if testing.Verbose() {
		t.Logf("plan:\n%s", p)
	}
}
