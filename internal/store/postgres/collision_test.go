package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// migrateTo applies the migrations up to version v only, for tests of
// what a later migration does to data written before it.
func migrateTo(t *testing.T, s *Store, v int) {
	t.Helper()
	if _, err := s.migrate(context.Background(), v); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationListsProviderIDCollisionsInsteadOfFailing: rows written
// before provider ids were unique per identity may share one. Migration
// 0008 must not fail on them (nor drop or change them): it marks them,
// the store lists them, and evidence naming the id is set aside.
func TestMigrationListsProviderIDCollisionsInsteadOfFailing(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	s := open(t, url, freshSchema(t, url), Options{NoMigrate: true})
	migrateTo(t, s.Store, 7)
	ids := map[string]string{}
	for _, k := range []struct{ key, identity string }{{"a", "demo-1"}, {"b", "demo-1"}, {"c", "demo-2"}, {"d", "demo-1"}} {
		p := storetest.Params(k.key)
		p.Identity = k.identity
		r, err := s.MessageEnqueue(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		ids[k.key] = r.Message.ID
	}
	for key, pid := range map[string]string{"a": "wamid.1", "b": "wamid.1", "c": "wamid.1", "d": "wamid.2"} {
		if _, err := s.pool.Exec(ctx, "UPDATE messages SET state = 'sent', provider_id = $1 WHERE id = $2", pid, ids[key]); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := s.Migrate(ctx)
	if err != nil {
		t.Fatalf("the migration failed on existing collisions: %v", err)
	}
	if len(applied) == 0 || applied[0] != 8 {
		t.Errorf("applied %v", applied)
	}
	col, err := s.ProviderIDCollisions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(col) != 2 || col[0].MessageID != min(ids["a"], ids["b"]) || col[1].MessageID != max(ids["a"], ids["b"]) ||
		col[0].Identity != "demo-1" || col[0].ProviderID != "wamid.1" || col[0].State != state.Sent {
		t.Errorf("collisions %+v", col)
	}
	ws, err := s.WebhookStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ws.ProviderIDCollisions != 2 {
		t.Errorf("stats %+v", ws)
	}
	evs := []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "demo-1", Body: []byte(`{}`)}}
	if err := s.WebhookStore(ctx, evs); err != nil {
		t.Fatal(err)
	}
	st := func(identity string) store.StatusEvidence {
		return store.StatusEvidence{Provider: store.WebhookWhatsApp, Identity: identity, ProviderID: "wamid.1",
			Status: state.Delivered, At: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), DedupeKey: identity + "|wamid.1|delivered"}
	}
	if _, err := s.WebhookIngest(ctx, []store.IngestParams{{EventID: evs[0].ID, Statuses: []store.StatusEvidence{st("demo-1"), st("demo-2")}}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.EvidenceApply(ctx, &store.ApplyParams{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range res.Applied {
		got[a.MessageID] = a.Outcome
	}
	if len(res.Applied) != 2 || got[ids["c"]] != store.EvidenceApplied || got[""] != store.EvidenceSuspect {
		t.Errorf("apply %+v", res.Applied)
	}
}
