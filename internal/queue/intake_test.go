package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/operator"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
)

// pgStore is a PostgreSQL store in a schema of the test's own
// (MSGQ_TEST_POSTGRES_URL; skipped without it, except in CI), with
// identities recorded for enqueue(), and the application's connection.
func pgStore(t *testing.T, ids ...store.SQLIdentity) (*postgres.Store, *pgx.Conn, string) {
	t.Helper()
	url := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
		}
		t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	ctx := context.Background()
	b := make([]byte, 8)
	rand.Read(b)
	schema := "msgq_test_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Close(context.Background())
	})
	st, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.SQLIdentitiesRecord(ctx, ids); err != nil {
		t.Fatal(err)
	}
	return st, conn, schema
}

// sqlEnqueue is an application's call of enqueue(args), args "name =>
// value" pairs.
func sqlEnqueue(t *testing.T, conn *pgx.Conn, schema string, args ...any) string {
	t.Helper()
	var named []string
	var vals []any
	for i := 0; i < len(args); i += 2 {
		vals = append(vals, args[i+1])
		named = append(named, fmt.Sprintf("%s => $%d", args[i], len(vals)))
	}
	var id string
	if err := conn.QueryRow(context.Background(), "SELECT "+schema+".enqueue("+strings.Join(named, ", ")+")", vals...).Scan(&id); err != nil {
		t.Fatalf("enqueue(%v): %v", args, err)
	}
	return id
}

func intakeIdentities(t *testing.T) map[string]*identities.Identity {
	t.Helper()
	ids, err := identities.Parse(map[string]identities.Config{
		"shop":  {Provider: "sim"},
		"texts": {Provider: "sim", Channel: "sms", MaxSegments: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestAdmissionDecidesIntakeAsMsgqSendWould: rows enqueue() took in are
// queued exactly as msgq send would write the same send (the number in
// E.164 from a national one with its region or the config's, the
// identity's channel, Go's body hash, so a later msgq send of it is a
// replay), or failed as invalid with msgq send's error for it; a row of
// an identity this config does not define waits for a host whose does.
func TestAdmissionDecidesIntakeAsMsgqSendWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn, schema := pgStore(t, store.SQLIdentity{Name: "shop", Default: true}, store.SQLIdentity{Name: "texts"}, store.SQLIdentity{Name: "elsewhere"})
	ids := intakeIdentities(t)
	national := sqlEnqueue(t, conn, schema, "key", "national", "identity", "texts", "to_addr", "(555) 123-4567", "region", "US", "text", "hi")
	byConfig := sqlEnqueue(t, conn, schema, "key", "by-config", "to_addr", "020 7946 0958", "template", "order_update", "params", []string{"Ada"})
	badNumber := sqlEnqueue(t, conn, schema, "key", "bad-number", "to_addr", "+1555", "text", "hi")
	long := sqlEnqueue(t, conn, schema, "key", "long", "identity", "texts", "to_addr", "+15551234567", "text", strings.Repeat("x", 200))
	badChannel := sqlEnqueue(t, conn, schema, "key", "bad-channel", "channel", "email", "to_addr", "+15551234567", "text", "hi")
	other := sqlEnqueue(t, conn, schema, "key", "other", "identity", "elsewhere", "to_addr", "+15551234567", "text", "hi")

	adm := &Admission{Store: st, Defaults: Defaults{Region: "GB", Identities: ids}, Batch: 2}
	res, err := adm.Run(ctx)
	if err != nil || res != (store.IntakeResult{Admitted: 2, Invalid: 3}) {
		t.Fatalf("admission: %+v, %v; want 2 admitted and 3 invalid", res, err)
	}
	for _, c := range []struct {
		id   string
		spec Spec
	}{
		{national, Spec{Key: "national", Identity: "texts", To: "(555) 123-4567", Region: "US", Text: "hi"}},
		{byConfig, Spec{Key: "by-config", Identity: "shop", To: "020 7946 0958", Template: "order_update", Params: []string{"Ada"}}},
	} {
		m, err := st.MessageGet(ctx, "", c.id)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.spec.Admit(time.Now(), Defaults{Tenant: store.DefaultTenant, Region: "GB", Identities: ids})
		if err != nil {
			t.Fatal(err)
		}
		if m.State != state.Queued || m.To != p.To || m.Channel != p.Channel || m.BodyHash != p.BodyHash() {
			t.Errorf("%s admitted as %+v; msgq send makes %+v", c.spec.Key, m, p)
		}
		r, err := st.MessageEnqueue(ctx, &p)
		if err != nil || !r.Replayed || r.Message.ID != c.id {
			t.Errorf("msgq send of %s after the admission: %+v, %v; want a replay of %s", c.spec.Key, r, err, c.id)
		}
	}
	for _, c := range []struct{ id, err string }{
		{badNumber, `to: invalid phone number "+1555"`},
		{long, "text: is 2 SMS segments"},
		{badChannel, "channel: identity shop (provider sim) does not send on email"},
	} {
		m, err := st.MessageGet(ctx, "", c.id)
		if err != nil || m.State != state.Failed || m.Reason != state.Invalid || !strings.HasPrefix(m.LastError, c.err) {
			t.Errorf("%s: %+v, %v; want failed invalid, %q", c.id, m, err, c.err)
		}
	}
	if m, err := st.MessageGet(ctx, "", other); err != nil || m.State != state.Intake {
		t.Errorf("another host's identity's row: %+v, %v; want it left in intake", m, err)
	}
	if res, err := adm.Run(ctx); err != nil || res != (store.IntakeResult{}) {
		t.Errorf("a second run: %+v, %v; want nothing to decide", res, err)
	}
}

// TestAdmissionsRacingDecideEachRowOnce: two processes' admissions over
// the same intake rows queue each once: one admit in its history, every
// row claimed by no one else.
func TestAdmissionsRacingDecideEachRowOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn, schema := pgStore(t, store.SQLIdentity{Name: "shop", Default: true})
	const n = 300
	for i := range n {
		sqlEnqueue(t, conn, schema, "key", fmt.Sprint("race-", i), "to_addr", "+15551234567", "text", fmt.Sprint("hi ", i))
	}
	ids := intakeIdentities(t)
	var wg sync.WaitGroup
	results := make([]store.IntakeResult, 2)
	for w := range results {
		wg.Go(func() {
			r, err := (&Admission{Store: st, Defaults: Defaults{Identities: ids}, Batch: 16}).Run(ctx)
			if err != nil {
				t.Error(err)
			}
			results[w] = r
		})
	}
	wg.Wait()
	if a := results[0].Admitted + results[1].Admitted; a != n {
		t.Fatalf("admitted %d + %d, want %d in all (%+v)", results[0].Admitted, results[1].Admitted, n, results)
	}
	var admits, queued int
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema+".history WHERE event = 'admit'), (SELECT count(*) FROM "+schema+".messages WHERE state = 'queued')").Scan(&admits, &queued); err != nil {
		t.Fatal(err)
	}
	if admits != n || queued != n {
		t.Fatalf("%d admit history rows and %d queued rows; want %d each", admits, queued, n)
	}
}

// TestAnAdmissionAheadOfTheDatabaseFailsTheRowAsExpired: a process whose
// clock runs ahead of the database's sees a row's deadline passed before
// the database does: the row fails as expired, never queued (with or
// without its content), and the input it was taken in with stays on it.
func TestAnAdmissionAheadOfTheDatabaseFailsTheRowAsExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn, schema := pgStore(t, store.SQLIdentity{Name: "shop", Default: true})
	id := sqlEnqueue(t, conn, schema, "key", "soon", "to_addr", "+15551234567", "text", "hi", "expires_in", 30*time.Second)
	ahead := func() time.Time { return time.Now().Add(time.Minute) }
	res, err := (&Admission{Store: st, Defaults: Defaults{Identities: intakeIdentities(t)}, Now: ahead}).Run(ctx)
	if err != nil || res != (store.IntakeResult{Expired: 1}) {
		t.Fatalf("admission: %+v, %v; want the row expired", res, err)
	}
	m, err := st.MessageGet(ctx, "", id)
	if err != nil || m.State != state.Failed || m.Reason != state.Expired || m.To != "+15551234567" || m.Payload == nil || m.Payload.Text != "hi" {
		t.Fatalf("%+v, %v; want failed(expired) with its input", m, err)
	}
}

// TestARowNeverAdmittedIsNotResent: msgq resend of a row the admission
// refused is refused: its columns are the caller's input, unchecked, and
// sending them would skip every check (here a text of four SMS segments
// where the identity allows one).
func TestARowNeverAdmittedIsNotResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn, schema := pgStore(t, store.SQLIdentity{Name: "shop", Default: true}, store.SQLIdentity{Name: "texts"})
	id := sqlEnqueue(t, conn, schema, "key", "long", "identity", "texts", "to_addr", "+15551234567", "text", strings.Repeat("x", 500))
	if res, err := (&Admission{Store: st, Defaults: Defaults{Identities: intakeIdentities(t)}}).Run(ctx); err != nil || res.Invalid != 1 {
		t.Fatalf("admission: %+v, %v", res, err)
	}
	_, err := operator.Resend(ctx, operator.ResendConfig{Store: st, Tenant: store.DefaultTenant, Ref: id, Key: "long-again", Force: true, AcceptRisk: true})
	if !errors.Is(err, state.ErrRefused) || !strings.Contains(err.Error(), "never admitted") {
		t.Fatalf("resend of a refused intake row: %v; want a refusal saying it was never admitted", err)
	}
	if _, err := st.MessageGet(ctx, store.DefaultTenant, "long-again"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused resend wrote a row: %v", err)
	}
}
