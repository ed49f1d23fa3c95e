package webhook_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
)

// refusing is a real store that refuses to ingest one delivery, as
// PostgreSQL refused a status whose id was too long for its index: the
// fault a parser change or a database limit can put in front of the
// processor.
type refusing struct {
	store.Store
	poison string
	// times is how many ingests of the poison fail (0: all of them).
	times, failed int
}

func (r *refusing) WebhookIngest(ctx context.Context, ps []store.IngestParams) (*store.IngestResult, error) {
	for _, p := range ps {
		if p.EventID == r.poison && p.Err == "" && (r.times == 0 || r.failed < r.times) {
			r.failed++
			return nil, errors.New("index row requires 12056 bytes, maximum size is 8191")
		}
	}
	return r.Store.WebhookIngest(ctx, ps)
}

func TestOnePoisonDeliveryDoesNotStopTheRest(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wamids := []string{"wamid.GOOD1", "wamid.POISON", "wamid.GOOD2"}
	var ids []string
	for i, w := range wamids {
		ids = append(ids, sentRow(t, st, "k"+w, w))
		if err := st.WebhookStore(ctx, []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "shop",
			Body: waStatus(w, "delivered", 1764410400+int64(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := st.WebhookPending(ctx, 10)
	if err != nil || len(evs) != 3 {
		t.Fatalf("pending: %v (%d)", err, len(evs))
	}
	p := &webhook.Processor{Store: &refusing{Store: st, poison: evs[1].ID}, RetryDelays: []time.Duration{time.Millisecond, time.Millisecond}}
	sum, err := p.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Applied != 2 || sum.Unreadable != 1 {
		t.Fatalf("applied %d statuses with %d unreadable, want the 2 good ones and the poison counted", sum.Applied, sum.Unreadable)
	}
	for i, id := range ids {
		m, err := st.MessageGet(ctx, store.DefaultTenant, id)
		if err != nil {
			t.Fatal(err)
		}
		want := state.Delivered
		if i == 1 {
			want = state.Sent
		}
		if m.State != want {
			t.Errorf("%s: %s, want %s", wamids[i], m.State, want)
		}
	}
	// The poison is kept, raw, with the store's reason: not retried forever,
	// not dropped.
	ev, err := st.WebhookGet(ctx, evs[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ProcessedAt == nil || ev.Error == "" || len(ev.Body) == 0 {
		t.Fatalf("poison delivery: processed %v, error %q, %d body bytes; want it marked with the reason and kept", ev.ProcessedAt, ev.Error, len(ev.Body))
	}
	if pending, _ := st.WebhookPending(ctx, 10); len(pending) != 0 {
		t.Fatalf("%d deliveries still pending", len(pending))
	}
}

// A store that is down ends the round with its error and marks nothing:
// the deliveries are tried again when it is back.
func TestAStoreThatIsDownMarksNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WebhookStore(ctx, []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "shop",
		Body: waStatus("wamid.X", "delivered", 1764410400)}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	p := &webhook.Processor{Store: st}
	if _, err := p.Once(ctx); err == nil {
		t.Fatal("processing against a closed store succeeded")
	}
	st2, err := sqlite.Open(ctx, filepath.Join(dir, "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if pending, _ := st2.WebhookPending(ctx, 10); len(pending) != 1 {
		t.Fatalf("%d deliveries pending after the store came back, want 1", len(pending))
	}
}

// A delivery the store refuses a couple of times and then takes (a
// deadlock victim, a busy database) is applied, never marked unreadable.
func TestAPassingStoreErrorMarksNothing(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := sentRow(t, st, "k1", "wamid.BLIP")
	if err := st.WebhookStore(ctx, []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "shop",
		Body: waStatus("wamid.BLIP", "delivered", 1764410400)}}); err != nil {
		t.Fatal(err)
	}
	evs, _ := st.WebhookPending(ctx, 1)
	p := &webhook.Processor{Store: &refusing{Store: st, poison: evs[0].ID, times: 2}, RetryDelays: []time.Duration{time.Millisecond, time.Millisecond}}
	sum, err := p.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.MessageGet(ctx, store.DefaultTenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Unreadable != 0 || m.State != state.Delivered {
		t.Fatalf("after two passing errors: %s with %d unreadable, want delivered and none", m.State, sum.Unreadable)
	}
}

// TestEvidenceThroughANumberNoIdentityHasIsNotPutDownToAnother: a
// delivery verified by shop's app secret names another phone_number_id
// (a number of the same app that msgq does not send for). Its status is
// set aside as suspect and its reply is listed under that number: neither
// may land on shop's row that happens to have the same wamid.
func TestEvidenceThroughANumberNoIdentityHasIsNotPutDownToAnother(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := sentRow(t, st, "k1", "wamid.SAME")
	other := "999000111222333"
	body := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":` +
		`{"messaging_product":"whatsapp","metadata":{"phone_number_id":"` + other + `"},` +
		`"statuses":[{"id":"wamid.SAME","status":"read","timestamp":"1764410400","recipient_id":"15551234567"}],` +
		`"messages":[{"from":"15551234567","id":"wamid.IN","timestamp":"1764410401","type":"text","text":{"body":"hi"},"context":{"id":"wamid.SAME"}}]}}]}]}`)
	if err := st.WebhookStore(ctx, []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "shop", Body: body}}); err != nil {
		t.Fatal(err)
	}
	p := &webhook.Processor{Store: st, PhoneNumberIDs: map[string]string{phoneID: "shop"}}
	sum, err := p.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Applied != 0 || sum.Statuses != 1 || sum.Inbound != 1 {
		t.Errorf("summary %+v", sum)
	}
	m, err := st.MessageGet(ctx, "", id)
	if err != nil || m.State != state.Sent {
		t.Fatalf("shop's row is %v (%v), want still sent", m.State, err)
	}
	sus, err := st.EvidenceSuspects(ctx, 0)
	if err != nil || len(sus) != 1 || sus[0].Suspect == "" {
		t.Errorf("suspects %+v (%v)", sus, err)
	}
	box, err := st.InboxList(ctx, &store.InboxParams{})
	if err != nil || len(box) != 1 || box[0].MessageID != nil || box[0].Identity != "whatsapp:"+other {
		t.Errorf("inbox %+v (%v)", box, err)
	}
}
