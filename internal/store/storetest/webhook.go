package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// wh is one test's store with the steps a webhook server and reconcile
// take: rows sent under provider ids, events stored and ingested,
// evidence applied.
type wh struct {
	t   *testing.T
	s   store.Store
	clk *Clock
}

func newWH(t *testing.T, h Harness) *wh {
	clk := NewClock(t0)
	return &wh{t: t, s: h.New(t, clk.Now), clk: clk}
}

var whCtx = context.Background()

// claimed enqueues key and claims it (the only queued row) for a minute.
func (w *wh) claimed(key string) *store.Message {
	w.t.Helper()
	p := Params(key)
	m := must[*store.EnqueueResult](w.t)(w.s.MessageEnqueue(whCtx, &p)).Message
	cs := must[[]store.Claimed](w.t)(w.s.MessageClaim(whCtx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1}))
	if len(cs) != 1 || cs[0].ID != m.ID {
		w.t.Fatalf("claimed %+v, want %s", cs, key)
	}
	return m
}

// accept records the provider's acceptance of a claimed row under pid.
func (w *wh) accept(id, pid string) {
	w.t.Helper()
	must[*store.Message](w.t)(w.s.MessageTransition(whCtx, &store.TransitionParams{ID: id, From: state.Sending,
		LeaseOwner: "drain-1", Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain, ProviderID: pid}))
}

// sent is a row the provider accepted under pid.
func (w *wh) sent(key, pid string) *store.Message {
	w.t.Helper()
	m := w.claimed(key)
	w.accept(m.ID, pid)
	return w.get(m.ID)
}

func (w *wh) get(id string) *store.Message {
	w.t.Helper()
	return must[*store.Message](w.t)(w.s.MessageGet(whCtx, "", id))
}

// event stores one raw delivery and returns its id.
func (w *wh) event() string {
	w.t.Helper()
	evs := []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "sim", Body: []byte(`{"entry":[]}`)}}
	if err := w.s.WebhookStore(whCtx, evs); err != nil {
		w.t.Fatal(err)
	}
	return evs[0].ID
}

// ingest stores an event carrying sts and ins and ingests it.
func (w *wh) ingest(sts []store.StatusEvidence, ins []store.Inbound) *store.IngestResult {
	w.t.Helper()
	return must[*store.IngestResult](w.t)(w.s.WebhookIngest(whCtx, []store.IngestParams{{EventID: w.event(), Statuses: sts, Inbound: ins}}))
}

func (w *wh) apply() *store.ApplyResult {
	w.t.Helper()
	return must[*store.ApplyResult](w.t)(w.s.EvidenceApply(whCtx, &store.ApplyParams{}))
}

// at is a provider timestamp: whole seconds, as WhatsApp sends them.
func at(sec int) time.Time { return t0.Truncate(time.Second).Add(time.Duration(sec) * time.Second) }

// status is a WhatsApp status of pid, deduplicated as the parser does.
func status(pid string, st state.State, sec int) store.StatusEvidence {
	return store.StatusEvidence{Provider: store.WebhookWhatsApp, Identity: "sim", ProviderID: pid, Status: st, At: at(sec),
		DedupeKey: fmt.Sprintf("%s|%s|%d", pid, st, at(sec).Unix())}
}

func inbound(pmid, from, ctxID string, sec int) store.Inbound {
	return store.Inbound{Provider: store.WebhookWhatsApp, Identity: "sim", ProviderMessageID: pmid, From: from,
		Type: "text", Text: "hi " + pmid, ContextID: ctxID, ReceivedAt: at(sec)}
}

func outcomes(ae []store.AppliedEvidence) string {
	var out []string
	for _, a := range ae {
		out = append(out, fmt.Sprintf("%s:%s->%s:%s", a.Status, a.From, a.To, a.Outcome))
	}
	return strings.Join(out, " ")
}

func testWebhook(t *testing.T, h Harness) {
	ctx := whCtx

	t.Run("stored events get ids and times and wait, oldest first, until ingested", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		earlier := t0.Add(-time.Minute)
		evs := []store.WebhookEvent{
			{Provider: store.WebhookWhatsApp, Identity: "sim", Headers: map[string]string{"x-hub-signature-256": "sha256=ab"}, Body: []byte(`{"a":1}`)},
			{Provider: store.WebhookHTTP, Body: []byte{0, 1, 2, 0xff}, ReceivedAt: earlier},
			{Provider: store.WebhookHTTP},
		}
		if err := w.s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
		now := t0.Truncate(store.Resolution)
		ids := map[string]bool{}
		for i, ev := range evs {
			if ev.ID == "" || ids[ev.ID] {
				t.Errorf("event %d: id %q", i, ev.ID)
			}
			ids[ev.ID] = true
		}
		if !evs[0].ReceivedAt.Equal(now) || !evs[1].ReceivedAt.Equal(earlier.Truncate(store.Resolution)) || !evs[2].ReceivedAt.Equal(now) {
			t.Errorf("received at %v %v %v", evs[0].ReceivedAt, evs[1].ReceivedAt, evs[2].ReceivedAt)
		}
		got := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, evs[0].ID))
		if got.Provider != store.WebhookWhatsApp || got.Identity != "sim" || string(got.Body) != `{"a":1}` ||
			got.Headers["x-hub-signature-256"] != "sha256=ab" || got.ProcessedAt != nil || got.Error != "" || !got.ReceivedAt.Equal(now) {
			t.Errorf("stored event %+v", got)
		}
		if got := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, evs[1].ID)); string(got.Body) != "\x00\x01\x02\xff" {
			t.Errorf("binary body came back as %q", got.Body)
		}
		if got := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, evs[2].ID)); len(got.Body) != 0 || len(got.Headers) != 0 {
			t.Errorf("empty event came back as %+v", got)
		}
		if _, err := w.s.WebhookGet(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown event: %v, want ErrNotFound", err)
		}
		pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 10))
		if len(pend) != 3 || pend[0].ID != evs[1].ID || pend[1].ID != evs[0].ID || pend[2].ID != evs[2].ID {
			t.Errorf("pending %+v, want the earlier one first, then in store order", pend)
		}
		if pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 1)); len(pend) != 1 || pend[0].ID != evs[1].ID {
			t.Errorf("pending with limit 1: %+v", pend)
		}
		res := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{{EventID: evs[1].ID}, {EventID: evs[2].ID, Err: "not JSON"}}))
		if *res != (store.IngestResult{Events: 2}) {
			t.Errorf("ingest of two empty events: %+v", res)
		}
		if pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 10)); len(pend) != 1 || pend[0].ID != evs[0].ID {
			t.Errorf("pending after ingest: %+v", pend)
		}
		bad := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, evs[2].ID))
		if bad.ProcessedAt == nil || !bad.ProcessedAt.Equal(now) || bad.Error != "not JSON" {
			t.Errorf("event processing could not read: %+v", bad)
		}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); st.UnprocessedWebhooks != 1 || st.UnreadableWebhooks != 1 {
			t.Errorf("stats %+v, want 1 unprocessed and 1 unreadable", st)
		}
	})

	t.Run("a group commit of hundreds of events is stored whole", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const n = 333
		evs := make([]store.WebhookEvent, n)
		for i := range evs {
			evs[i] = store.WebhookEvent{Provider: store.WebhookWhatsApp, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		}
		if err := w.s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
		pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 2*n))
		if len(pend) != n {
			t.Fatalf("%d pending, want %d", len(pend), n)
		}
		for i, ev := range pend {
			// One store clock reading: ids break the tie in store order.
			if ev.ID != evs[i].ID || string(ev.Body) != fmt.Sprintf(`{"n":%d}`, i) {
				t.Fatalf("pending %d: %s %s, want %s", i, ev.ID, ev.Body, evs[i].ID)
			}
		}
	})

	t.Run("a copy of a stored delivery (by its dedupe key) is counted, not stored again", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		wa, api := store.WebhookWhatsApp, store.WebhookHTTP
		first := []store.WebhookEvent{{Provider: wa, Identity: "shop", Body: []byte(`{"first":1}`), DedupeKey: "body:aa", Items: 2}}
		if err := w.s.WebhookStore(ctx, first); err != nil || first[0].ID == "" || first[0].Replayed {
			t.Fatalf("first copy: %+v, %v", first[0], err)
		}
		// One group commit: copies of it (one with another body), a new
		// delivery and a copy of it with another body (a provider's
		// delivery id names the delivery, not its body), the same key under
		// another identity and another provider, and deliveries without a
		// key (stored before keys were kept, or by webhook replay): never a
		// copy of anything.
		batch := []store.WebhookEvent{
			{Provider: wa, Identity: "shop", Body: []byte(`{"first":1}`), DedupeKey: "body:aa", Items: 2},
			{Provider: api, Identity: "api", Body: []byte(`{"second":1}`), DedupeKey: "webhook-id:x", Items: 1},
			{Provider: api, Identity: "api", Body: []byte(`{"second":"other"}`), DedupeKey: "webhook-id:x", Items: 1},
			{Provider: wa, Identity: "shop", Body: []byte(`{"first":"other"}`), DedupeKey: "body:aa", Items: 3},
			{Provider: wa, Identity: "outlet", Body: []byte(`{"first":1}`), DedupeKey: "body:aa", Items: 2},
			{Provider: api, Identity: "shop", Body: []byte(`{"first":1}`), DedupeKey: "body:aa", Items: 2},
			{Provider: wa, Identity: "shop", Body: []byte(`{}`), Items: 1},
			{Provider: wa, Identity: "shop", Body: []byte(`{}`), Items: 1},
		}
		if err := w.s.WebhookStore(ctx, batch); err != nil {
			t.Fatal(err)
		}
		for i, ev := range batch {
			copyOf := i == 0 || i == 2 || i == 3
			if ev.Replayed != copyOf || (ev.ID == "") != copyOf {
				t.Errorf("event %d (%s %s %s): replayed %v, id %q; want replayed %v", i, ev.Provider, ev.Identity, ev.DedupeKey, ev.Replayed, ev.ID, copyOf)
			}
		}
		pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 100))
		if len(pend) != 6 {
			t.Fatalf("%d events stored, want the first and the five that are no copies: %+v", len(pend), pend)
		}
		// The first copy is kept as it came: it is the evidence.
		if got := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, first[0].ID)); string(got.Body) != `{"first":1}` || got.DedupeKey != "body:aa" {
			t.Errorf("the first copy now reads %+v", got)
		}
		if got := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, batch[1].ID)); string(got.Body) != `{"second":1}` || got.DedupeKey != "webhook-id:x" {
			t.Errorf("the first of two bodies under one delivery id reads %+v", got)
		}
		// Three copies; the items they carried, as processing would have
		// counted them had they been stored again.
		want := store.WebhookStats{ReplayedWebhooks: 3, DuplicateWebhooks: 2 + 1 + 3, UnprocessedWebhooks: 6}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("webhook stats %+v, want %+v", st, want)
		}
		if st := must[*store.Stats](t)(w.s.Stats(ctx, &store.StatsParams{})); st.WebhookStats != want {
			t.Errorf("stats' webhook figures %+v, want %+v", st.WebhookStats, want)
		}
		// Processed or not, the first copy keeps the key: a later copy is
		// not stored either, and adds to the same counters.
		must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{{EventID: first[0].ID}}))
		again := []store.WebhookEvent{{Provider: wa, Identity: "shop", Body: []byte(`{"first":1}`), DedupeKey: "body:aa", Items: 2}}
		if err := w.s.WebhookStore(ctx, again); err != nil || !again[0].Replayed || again[0].ID != "" {
			t.Fatalf("a copy of a processed delivery: %+v, %v", again[0], err)
		}
		want = store.WebhookStats{ReplayedWebhooks: 4, DuplicateWebhooks: 8, UnprocessedWebhooks: 5}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("webhook stats %+v, want %+v", st, want)
		}
		// Once retention has deleted the first copy, the key is free: a
		// copy is stored again (and processing finds its items stored).
		w.clk.Advance(time.Hour)
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &store.PurgeParams{Before: w.clk.Now()})); got.Events != 1 {
			t.Fatalf("purge %+v, want the processed first copy", got)
		}
		if err := w.s.WebhookStore(ctx, again); err != nil || again[0].Replayed || again[0].ID == "" {
			t.Fatalf("a copy after the first was purged: %+v, %v", again[0], err)
		}
	})

	t.Run("copies stored at once from several processes keep one", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		handles := []store.Store{w.s, h.Reopen(t, w.s), h.Reopen(t, w.s), h.Reopen(t, w.s)}
		const each = 10
		var wg sync.WaitGroup
		errs := make(chan error, len(handles)*each)
		stored := make(chan string, len(handles)*each)
		for hi, s := range handles {
			wg.Go(func() {
				for i := range each {
					// A new delivery with each copy, so that each write
					// has something to store besides the copy.
					evs := []store.WebhookEvent{
						{Provider: store.WebhookWhatsApp, Identity: "shop", Body: []byte(`{"same":1}`), DedupeKey: "body:same", Items: 1},
						{Provider: store.WebhookWhatsApp, Identity: "shop", Body: fmt.Appendf(nil, `{"own":%d}`, i), DedupeKey: fmt.Sprintf("body:%d-%d", hi, i)},
					}
					if err := s.WebhookStore(ctx, evs); err != nil {
						errs <- err
						return
					}
					if !evs[0].Replayed {
						stored <- evs[0].ID
					}
					if evs[1].Replayed {
						errs <- fmt.Errorf("a delivery of its own was taken for a copy: %+v", evs[1])
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		close(stored)
		for err := range errs {
			t.Fatal(err)
		}
		var ids []string
		for id := range stored {
			ids = append(ids, id)
		}
		if len(ids) != 1 {
			t.Fatalf("%d copies stored, want 1: %v", len(ids), ids)
		}
		n := len(handles) * each
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); st.ReplayedWebhooks != int64(n-1) || st.DuplicateWebhooks != int64(n-1) ||
			st.UnprocessedWebhooks != n+1 {
			t.Errorf("stats %+v, want %d replays (and duplicates) and %d deliveries stored", st, n-1, n+1)
		}
	})

	t.Run("a group commit larger than one statement keeps the first of each key", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const n, keys = 150, 40
		evs := make([]store.WebhookEvent, n)
		for i := range evs {
			evs[i] = store.WebhookEvent{Provider: store.WebhookWhatsApp, Identity: "shop", Body: fmt.Appendf(nil, `{"n":%d}`, i),
				DedupeKey: fmt.Sprintf("body:%d", i%keys), Items: 1}
		}
		if err := w.s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Replayed != (i >= keys) {
				t.Fatalf("event %d: replayed %v", i, ev.Replayed)
			}
		}
		pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 2*n))
		if len(pend) != keys {
			t.Fatalf("%d stored, want %d", len(pend), keys)
		}
		for i, ev := range pend {
			if ev.ID != evs[i].ID || string(ev.Body) != fmt.Sprintf(`{"n":%d}`, i) {
				t.Fatalf("stored %d: %s %s, want the first of its key", i, ev.ID, ev.Body)
			}
		}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); st.ReplayedWebhooks != n-keys || st.DuplicateWebhooks != n-keys {
			t.Errorf("stats %+v, want %d replays", st, n-keys)
		}
	})

	t.Run("ingest keeps each status and inbound message once and counts the rest", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a, b, c := w.event(), w.event(), w.event()
		s1, s2 := status("wamid.1", state.Delivered, 1), status("wamid.2", state.Sent, 2)
		s2.CallbackRef, s2.ErrorCode = "ref-2", ""
		in := inbound("wamid.in1", "+15551234567", "", 3)
		ps := []store.IngestParams{
			{EventID: a, Statuses: []store.StatusEvidence{s1, s2, s1}, Inbound: []store.Inbound{in}},
			{EventID: b, Err: "unsupported payload", Statuses: []store.StatusEvidence{status("wamid.9", state.Read, 9)}},
		}
		res := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, ps))
		if *res != (store.IngestResult{Events: 2, Statuses: 2, Inbound: 1, Duplicates: 1}) {
			t.Errorf("first ingest: %+v", res)
		}
		if ps[0].Statuses[0].ID == "" || ps[0].Statuses[1].ID == "" || ps[0].Statuses[2].ID != "" || ps[0].Inbound[0].ID == "" {
			t.Errorf("ids in place: %+v", ps[0])
		}
		if again := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, ps)); *again != (store.IngestResult{}) {
			t.Errorf("ingesting processed events again: %+v, want nothing", again)
		}
		// A provider's redelivery: another event with the same content.
		res = must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: c, Statuses: []store.StatusEvidence{s1, s2}, Inbound: []store.Inbound{in}},
		}))
		if *res != (store.IngestResult{Events: 1, Duplicates: 3}) {
			t.Errorf("redelivery: %+v", res)
		}
		parked := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0))
		if len(parked) != 2 {
			t.Fatalf("parked %+v, want 2 statuses", parked)
		}
		p1 := parked[0]
		if p1.ProviderID != "wamid.1" || p1.Status != state.Delivered || !p1.At.Equal(at(1)) || p1.EventID != a ||
			p1.Provider != store.WebhookWhatsApp || p1.Identity != "sim" || p1.DedupeKey != s1.DedupeKey ||
			p1.MessageID != "" || p1.Outcome != "" || p1.AppliedAt != nil || !p1.ReceivedAt.Equal(t0.Truncate(store.Resolution)) {
			t.Errorf("parked status %+v", p1)
		}
		if parked[1].CallbackRef != "ref-2" || parked[1].ProviderID != "wamid.2" {
			t.Errorf("parked status %+v", parked[1])
		}
		ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, b))
		if ev.ProcessedAt == nil || ev.Error != "unsupported payload" {
			t.Errorf("event with an error: %+v", ev)
		}
		want := store.WebhookStats{DuplicateWebhooks: 4, UnattributedInbound: 1, ParkedEvidence: 2, UnreadableWebhooks: 1}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("webhook stats %+v, want %+v", st, want)
		}
		if st := must[*store.Stats](t)(w.s.Stats(ctx, &store.StatsParams{})); st.WebhookStats != want {
			t.Errorf("stats' webhook figures %+v, want %+v", st.WebhookStats, want)
		}
		box := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{}))
		if len(box) != 1 || box[0].ProviderMessageID != "wamid.in1" || box[0].EventID != a || box[0].Text != "hi wamid.in1" ||
			box[0].MessageID != nil || !box[0].ReceivedAt.Equal(at(3)) || !box[0].StoredAt.Equal(t0.Truncate(store.Resolution)) {
			t.Errorf("inbox %+v", box)
		}
	})

	t.Run("concurrent ingests of one event write it once", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		handles := []store.Store{w.s, h.Reopen(t, w.s), h.Reopen(t, w.s), h.Reopen(t, w.s)}
		ev := w.event()
		var sts []store.StatusEvidence
		for i := range 20 {
			sts = append(sts, status(fmt.Sprintf("wamid.%d", i), state.Delivered, i))
		}
		var mu sync.Mutex
		var total store.IngestResult
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]store.StatusEvidence, len(sts))
				copy(mine, sts)
				r, err := handles[i%len(handles)].WebhookIngest(ctx, []store.IngestParams{{EventID: ev, Statuses: mine}})
				if err != nil {
					t.Errorf("ingest %d: %v", i, err)
					return
				}
				mu.Lock()
				total.Events += r.Events
				total.Statuses += r.Statuses
				total.Duplicates += r.Duplicates
				mu.Unlock()
			}()
		}
		wg.Wait()
		if total != (store.IngestResult{Events: 1, Statuses: 20}) {
			t.Errorf("eight ingests of one event: %+v, want it written once", total)
		}
	})

	t.Run("an event read with skipped items keeps its good items and its body, and counts as unreadable", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		skipped, both, clean := w.event(), w.event(), w.event()
		const why = "entry 0 change 1: unknown field reactions; entry 1: no messaging_product"
		in := inbound("in-1", "+15551234567", "", 3)
		res := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: skipped, Statuses: []store.StatusEvidence{status("wamid.1", state.Delivered, 1)}, Inbound: []store.Inbound{in}, Skipped: why},
			// Err wins over Skipped: nothing is written, the error is Err.
			{EventID: both, Statuses: []store.StatusEvidence{status("wamid.2", state.Read, 2)}, Err: "not JSON", Skipped: "ignored"},
			{EventID: clean},
		}))
		if *res != (store.IngestResult{Events: 3, Statuses: 1, Inbound: 1}) {
			t.Errorf("ingest %+v", res)
		}
		now := t0.Truncate(store.Resolution)
		if ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, skipped)); ev.ProcessedAt == nil || !ev.ProcessedAt.Equal(now) || ev.Error != why {
			t.Errorf("event with skipped items %+v, want processed with the skipped items as its error", ev)
		}
		if ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, both)); ev.ProcessedAt == nil || ev.Error != "not JSON" {
			t.Errorf("event with an error and skipped items %+v, want the error", ev)
		}
		if parked := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0)); len(parked) != 1 || parked[0].ProviderID != "wamid.1" || parked[0].EventID != skipped {
			t.Errorf("statuses %+v, want only the good one of the event with skipped items", parked)
		}
		if box := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{})); len(box) != 1 || box[0].ProviderMessageID != "in-1" || box[0].EventID != skipped {
			t.Errorf("inbox %+v", box)
		}
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "sim", "+15551234567")); !got.Equal(at(3)) {
			t.Errorf("window %v, want it opened by the good inbound message", got)
		}
		want := store.WebhookStats{UnattributedInbound: 1, ParkedEvidence: 1, UnreadableWebhooks: 2}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("stats %+v, want %+v", st, want)
		}
		bad := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 0))
		if len(bad) != 2 || bad[0].ID != skipped || bad[1].ID != both || bad[0].Error != why || string(bad[0].Body) != `{"entry":[]}` {
			t.Errorf("unreadable %+v, want both, oldest first", bad)
		}
		// Retention keeps its body: the only record of what was skipped.
		p := store.PurgeParams{Before: t0.Add(time.Hour)}
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); got.Events != 1 {
			t.Errorf("purge %+v, want only the clean event", got)
		}
		for _, id := range []string{skipped, both} {
			if _, err := w.s.WebhookGet(ctx, id); err != nil {
				t.Errorf("unreadable event %s: %v, want it kept", id, err)
			}
		}
		if _, err := w.s.WebhookGet(ctx, clean); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("clean event: %v, want it purged", err)
		}
	})

	t.Run("unreadable events are listed oldest first with their bodies", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		if got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 0)); got == nil || len(got) != 0 {
			t.Errorf("unreadable of an empty store: %#v, want an empty list", got)
		}
		// Received in the order c, a, b, d, e; stored in the order a..e.
		evs := []store.WebhookEvent{
			{Provider: store.WebhookWhatsApp, Identity: "sim", Headers: map[string]string{"content-type": "application/json"},
				Body: []byte(`{"a":1}`), ReceivedAt: t0.Add(-2 * time.Minute)},
			{Provider: store.WebhookHTTP, Body: []byte{0, 'b', 0xff}, ReceivedAt: t0.Add(-time.Minute)},
			{Provider: store.WebhookHTTP, Body: []byte(`c`), ReceivedAt: t0.Add(-3 * time.Minute)},
			{Provider: store.WebhookHTTP, Body: []byte(`d`)},
			{Provider: store.WebhookHTTP, Body: []byte(`e`)},
		}
		if err := w.s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
		must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: evs[0].ID, Skipped: "skipped a"},
			{EventID: evs[1].ID, Err: "error b"},
			{EventID: evs[2].ID}, // clean
			{EventID: evs[3].ID, Err: "error d"},
			// e stays pending
		}))
		ids := func(list []store.WebhookEvent) string {
			var out []string
			for _, ev := range list {
				out = append(out, ev.ID)
			}
			return strings.Join(out, " ")
		}
		got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 0))
		if want := strings.Join([]string{evs[0].ID, evs[1].ID, evs[3].ID}, " "); ids(got) != want {
			t.Fatalf("unreadable %s, want %s (a, b, d)", ids(got), want)
		}
		a, b := got[0], got[1]
		if a.Provider != store.WebhookWhatsApp || a.Identity != "sim" || a.Headers["content-type"] != "application/json" ||
			string(a.Body) != `{"a":1}` || a.Error != "skipped a" || a.ProcessedAt == nil ||
			!a.ReceivedAt.Equal(t0.Add(-2*time.Minute).Truncate(store.Resolution)) {
			t.Errorf("unreadable a %+v", a)
		}
		if string(b.Body) != "\x00b\xff" || b.Error != "error b" {
			t.Errorf("unreadable b %+v", b)
		}
		if got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 2)); ids(got) != evs[0].ID+" "+evs[1].ID {
			t.Errorf("unreadable with limit 2: %s", ids(got))
		}
		// Without a limit, DefaultListLimit.
		more := make([]store.WebhookEvent, store.DefaultListLimit)
		ps := make([]store.IngestParams, len(more))
		for i := range more {
			more[i] = store.WebhookEvent{Provider: store.WebhookHTTP, Body: []byte(`{}`)}
		}
		if err := w.s.WebhookStore(ctx, more); err != nil {
			t.Fatal(err)
		}
		for i := range more {
			ps[i] = store.IngestParams{EventID: more[i].ID, Err: "bad"}
		}
		must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, ps))
		if got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 0)); len(got) != store.DefaultListLimit || got[0].ID != evs[0].ID {
			t.Errorf("unreadable without a limit: %d, want %d, oldest first", len(got), store.DefaultListLimit)
		}
		if got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 1000)); len(got) != store.DefaultListLimit+3 {
			t.Errorf("unreadable with limit 1000: %d, want %d", len(got), store.DefaultListLimit+3)
		}
	})

	t.Run("a retried event is read again, and what it wrote before is neither written nor counted twice", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const customer = "+15551234567"
		s1, s2, s3 := status("wamid.1", state.Delivered, 1), status("wamid.2", state.Delivered, 2), status("wamid.3", state.Read, 3)
		in1, in2 := inbound("in-1", customer, "", 4), inbound("in-2", customer, "", 5)
		skipped, unread, clean := w.event(), w.event(), w.event()
		// First reading: skipped has a good status (twice: a duplicate
		// within the event), a good inbound message, and items it skipped;
		// unread could not be read at all.
		res := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: skipped, Statuses: []store.StatusEvidence{s1, s1}, Inbound: []store.Inbound{in1}, Skipped: "entry 0: s2 and in2"},
			{EventID: unread, Err: "not JSON"},
			{EventID: clean, Statuses: []store.StatusEvidence{s3}},
		}))
		if *res != (store.IngestResult{Events: 3, Statuses: 2, Inbound: 1, Duplicates: 1}) {
			t.Fatalf("first reading %+v", res)
		}
		firstS1 := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0))[0]
		firstIn1 := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{}))[0]

		// Nothing to retry: unknown, pending, processed cleanly.
		if err := w.s.WebhookRetry(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("retry of an unknown event: %v, want ErrNotFound", err)
		}
		pending := w.event()
		for name, id := range map[string]string{"pending": pending, "clean": clean} {
			var ie *store.InvalidError
			if err := w.s.WebhookRetry(ctx, id); !errors.As(err, &ie) {
				t.Errorf("retry of a %s event: %v, want *store.InvalidError", name, err)
			}
		}
		if ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, clean)); ev.ProcessedAt == nil || ev.Error != "" {
			t.Errorf("a refused retry changed the event: %+v", ev)
		}

		for _, id := range []string{skipped, unread} {
			if err := w.s.WebhookRetry(ctx, id); err != nil {
				t.Fatalf("retry %s: %v", id, err)
			}
			ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, id))
			if ev.ProcessedAt != nil || ev.Error != "" || string(ev.Body) != `{"entry":[]}` {
				t.Errorf("retried event %+v, want it pending with its body", ev)
			}
		}
		var ie *store.InvalidError
		if err := w.s.WebhookRetry(ctx, skipped); !errors.As(err, &ie) {
			t.Errorf("retry of a retried (pending) event: %v, want *store.InvalidError", err)
		}
		pend := must[[]store.WebhookEvent](t)(w.s.WebhookPending(ctx, 10))
		if len(pend) != 3 || pend[0].ID != skipped || pend[1].ID != unread || pend[2].ID != pending {
			t.Errorf("pending %+v, want the retried events back in their place, oldest first", pend)
		}
		if got := must[[]store.WebhookEvent](t)(w.s.WebhookUnreadable(ctx, 0)); len(got) != 0 {
			t.Errorf("unreadable after the retries: %+v", got)
		}
		want := store.WebhookStats{DuplicateWebhooks: 1, UnattributedInbound: 1, ParkedEvidence: 2, UnprocessedWebhooks: 3}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("stats after the retries %+v, want %+v", st, want)
		}

		// Second reading, with a fixed parser: skipped now reads whole,
		// unread reads a new status and one another event already had
		// (a true duplicate).
		res = must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: skipped, Statuses: []store.StatusEvidence{s1, s1, s2}, Inbound: []store.Inbound{in1, in2}},
			{EventID: unread, Statuses: []store.StatusEvidence{s3, status("wamid.4", state.Sent, 6)}},
		}))
		if *res != (store.IngestResult{Events: 2, Statuses: 2, Inbound: 1, Duplicates: 1, Reread: 3}) {
			t.Errorf("second reading %+v, want s1 twice and in1 reread, s3 a duplicate", res)
		}
		for _, id := range []string{skipped, unread} {
			if ev := must[*store.WebhookEvent](t)(w.s.WebhookGet(ctx, id)); ev.ProcessedAt == nil || ev.Error != "" {
				t.Errorf("event %+v, want it processed cleanly", ev)
			}
		}
		// Written once, under their first ids.
		parked := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0))
		if len(parked) != 4 || parked[0].ID != firstS1.ID || parked[0].ProviderID != "wamid.1" {
			t.Errorf("statuses %+v, want 4 with s1 as first written", parked)
		}
		box := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{}))
		if len(box) != 2 || box[1].ID != firstIn1.ID || box[0].ProviderMessageID != "in-2" || box[0].EventID != skipped {
			t.Errorf("inbox %+v, want in-2 new and in-1 as first written", box)
		}
		// The counter counts the duplicate within the event once (first
		// reading) and the true duplicate; the rereads not at all.
		want = store.WebhookStats{DuplicateWebhooks: 2, UnattributedInbound: 2, ParkedEvidence: 4, UnprocessedWebhooks: 1}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); *st != want {
			t.Errorf("stats after the second reading %+v, want %+v", st, want)
		}
		// A third reading of a processed event writes nothing, as ever.
		if again := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: skipped, Statuses: []store.StatusEvidence{s1}, Inbound: []store.Inbound{in1}},
		})); *again != (store.IngestResult{}) {
			t.Errorf("ingest of a processed event: %+v, want nothing", again)
		}
		// A provider's redelivery of the same content is still a duplicate.
		if redo := w.ingest([]store.StatusEvidence{s1}, []store.Inbound{in1}); redo.Duplicates != 2 || redo.Reread != 0 {
			t.Errorf("redelivery %+v, want two duplicates", redo)
		}
	})

	t.Run("retention deletes old read events and blanks old inbound texts, keeping what dedupe and attribution need", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.sent("order-1", "wamid.out1")
		// Old: a read event with a status, a reply and a button reply; one
		// processing could not read; one not processed yet; an inbound
		// message with nothing to drop (a picture).
		replied := inbound("in-reply", "+15551234567", "wamid.out1", 1)
		button := inbound("in-button", "+15557654321", "", 2)
		button.Type, button.Text, button.ReplyID, button.ReplyTitle = "button", "", "btn-yes", "Yes"
		picture := inbound("in-picture", "+15557654321", "", 3)
		picture.Type, picture.Text = "image", ""
		read := w.event()
		unreadable, pending := w.event(), w.event()
		must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, []store.IngestParams{
			{EventID: read, Statuses: []store.StatusEvidence{status("wamid.parked", state.Delivered, 1)},
				Inbound: []store.Inbound{replied, button, picture}},
			{EventID: unreadable, Err: "not JSON"},
		}))
		// Recent: a read event with an inbound message, an hour later.
		w.clk.Advance(time.Hour)
		recentIn := inbound("in-recent", "+15551234567", "", 3600)
		recent := w.ingest(nil, []store.Inbound{recentIn})
		if recent.Inbound != 1 {
			t.Fatalf("recent ingest %+v", recent)
		}
		box := func() map[string]store.Inbound {
			out := map[string]store.Inbound{}
			for _, in := range must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{})) {
				out[in.ProviderMessageID] = in
			}
			return out
		}
		beforePurge := box()

		// Tenant and purpose do not apply to webhook data: they filter
		// nothing here.
		p := store.PurgeParams{Before: t0.Add(30 * time.Minute), Tenant: "acme", Purpose: "marketing", DryRun: true}
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{Events: 1, Inbound: 2}) {
			t.Errorf("dry run %+v, want the read event and two texts (the picture has none)", got)
		}
		if _, err := w.s.WebhookGet(ctx, read); err != nil {
			t.Errorf("a dry run deleted the event: %v", err)
		}
		if got := box(); !reflect.DeepEqual(got, beforePurge) {
			t.Errorf("a dry run changed the inbox: %+v", got)
		}

		p.DryRun = false
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{Events: 1, Inbound: 2}) {
			t.Errorf("purge %+v, want the read event and two texts", got)
		}
		if _, err := w.s.WebhookGet(ctx, read); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the old read event: %v, want it deleted", err)
		}
		for _, id := range []string{unreadable, pending} {
			if _, err := w.s.WebhookGet(ctx, id); err != nil {
				t.Errorf("event %s, unreadable or not processed, must be kept whatever its age: %v", id, err)
			}
		}
		after := box()
		for _, pmid := range []string{"in-reply", "in-button"} {
			got, was := after[pmid], beforePurge[pmid]
			if got.Text != "" || got.ReplyTitle != "" {
				t.Errorf("%s kept text %q, reply title %q", pmid, got.Text, got.ReplyTitle)
			}
			// Everything else stays: ids, sender, the choice, the link.
			got.Text, got.ReplyTitle, was.Text, was.ReplyTitle = "", "", "", ""
			if !reflect.DeepEqual(got, was) {
				t.Errorf("%s: %+v, want %+v but for the text", pmid, got, was)
			}
		}
		if r := after["in-reply"]; r.MessageID == nil || *r.MessageID != m.ID || r.From != "+15551234567" {
			t.Errorf("the purged reply lost its attribution: %+v", r)
		}
		if b := after["in-button"]; b.ReplyID != "btn-yes" {
			t.Errorf("the purged button reply lost its reply id: %+v", b)
		}
		if r := after["in-recent"]; r.Text != "hi in-recent" {
			t.Errorf("a recent text was purged: %+v", r)
		}
		if parked := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0)); len(parked) != 1 || parked[0].EventID != read {
			t.Errorf("statuses of a purged event: %+v, want them kept", parked)
		}
		st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx))
		if st.UnreadableWebhooks != 1 || st.UnprocessedWebhooks != 1 {
			t.Errorf("stats %+v, want the unreadable and the pending event still counted", st)
		}

		// Purged rows are not counted again.
		p.DryRun = true
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{}) {
			t.Errorf("dry run after the purge %+v, want nothing", got)
		}
		p.DryRun = false
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{}) {
			t.Errorf("second purge %+v, want nothing", got)
		}
		// A redelivery of a purged message is still a duplicate, and
		// writes no text back.
		if res := w.ingest(nil, []store.Inbound{replied}); res.Inbound != 0 || res.Duplicates != 1 {
			t.Errorf("redelivery of a purged inbound message: %+v, want a duplicate", res)
		}
		if r := box()["in-reply"]; r.Text != "" {
			t.Errorf("a redelivery wrote the text back: %+v", r)
		}

		// Everything read so far, with a bound of now.
		p.Before = w.clk.Now().Add(time.Second)
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{Events: 2, Inbound: 1}) {
			t.Errorf("purge of everything %+v, want the recent and the redelivered events and the recent text", got)
		}
		if _, err := w.s.WebhookGet(ctx, unreadable); err != nil {
			t.Errorf("the unreadable event: %v, want it kept", err)
		}
	})

	t.Run("a purge of more than one batch takes every row", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const n = 2345 // more than two batches of a thousand
		evs := make([]store.WebhookEvent, n)
		for i := range evs {
			evs[i] = store.WebhookEvent{Provider: store.WebhookWhatsApp, Identity: "sim", Body: []byte(`{}`)}
		}
		if err := w.s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
		ps := make([]store.IngestParams, n)
		for i := range ps {
			ps[i] = store.IngestParams{EventID: evs[i].ID, Inbound: []store.Inbound{inbound(fmt.Sprintf("in-%d", i), "+15551234567", "", i)}}
		}
		if res := must[*store.IngestResult](t)(w.s.WebhookIngest(ctx, ps)); res.Events != n || res.Inbound != n {
			t.Fatalf("ingest %+v", res)
		}
		p := store.PurgeParams{Before: w.clk.Now().Add(time.Second)}
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{Events: n, Inbound: n}) {
			t.Errorf("purge %+v, want %d of each", got, n)
		}
		for _, in := range must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{Limit: n})) {
			if in.Text != "" {
				t.Fatalf("text left after the purge: %+v", in)
			}
		}
		if got := must[*store.WebhookPurged](t)(w.s.WebhookPurge(ctx, &p)); *got != (store.WebhookPurged{}) {
			t.Errorf("again %+v, want nothing", got)
		}
	})

	t.Run("inbound opens the service window and links to the row replied to", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "sim", "+15551234567")); !got.IsZero() {
			t.Errorf("window before any inbound: %v", got)
		}
		m := w.sent("order-1", "wamid.out1")
		w.ingest(nil, []store.Inbound{inbound("in-1", "+15551234567", "wamid.out1", 10)})
		w.ingest(nil, []store.Inbound{inbound("in-0", "+15551234567", "", 5)}) // late delivery of an older message
		other := inbound("in-2", "+15557654321", "wamid.nobody", 20)
		other.Identity = "shop"
		other.Type, other.ReplyID, other.ReplyTitle = "button", "btn-yes", "Yes"
		w.ingest(nil, []store.Inbound{other})
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "sim", "+15551234567")); !got.Equal(at(10)) {
			t.Errorf("window %v, want the latest inbound %v", got, at(10))
		}
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "shop", "+15557654321")); !got.Equal(at(20)) {
			t.Errorf("shop window %v", got)
		}
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "shop", "+15551234567")); !got.IsZero() {
			t.Errorf("a window of another identity: %v", got)
		}
		w.ingest(nil, []store.Inbound{inbound("in-3", "+15551234567", "", 30)})
		if got := must[time.Time](t)(w.s.ServiceWindow(ctx, "sim", "+15551234567")); !got.Equal(at(30)) {
			t.Errorf("window %v, want it moved to %v", got, at(30))
		}

		pmids := func(p store.InboxParams) string {
			var out []string
			for _, in := range must[[]store.Inbound](t)(w.s.InboxList(ctx, &p)) {
				out = append(out, in.ProviderMessageID)
			}
			return fmt.Sprint(out)
		}
		for _, tc := range []struct {
			name string
			p    store.InboxParams
			want string
		}{
			{"newest first", store.InboxParams{}, "[in-3 in-2 in-1 in-0]"},
			{"unattributed", store.InboxParams{Unattributed: true}, "[in-3 in-2 in-0]"},
			{"by identity", store.InboxParams{Identity: "shop"}, "[in-2]"},
			{"by sender", store.InboxParams{From: "+15551234567"}, "[in-3 in-1 in-0]"},
			{"since", store.InboxParams{Since: at(10)}, "[in-3 in-2 in-1]"},
			{"limit", store.InboxParams{Limit: 2}, "[in-3 in-2]"},
			{"combined", store.InboxParams{Unattributed: true, From: "+15551234567", Since: at(1)}, "[in-3 in-0]"},
		} {
			if got := pmids(tc.p); got != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
			}
		}
		box := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{Identity: "shop"}))
		if len(box) != 1 || box[0].ReplyID != "btn-yes" || box[0].ReplyTitle != "Yes" || box[0].Type != "button" ||
			box[0].ContextID != "wamid.nobody" || box[0].From != "+15557654321" || box[0].MessageID != nil {
			t.Errorf("button reply %+v", box)
		}
		linked := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{Since: at(10), Identity: "sim"}))
		if len(linked) != 2 || linked[1].MessageID == nil || *linked[1].MessageID != m.ID {
			t.Errorf("reply to %s: %+v", m.ID, linked)
		}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); st.UnattributedInbound != 3 {
			t.Errorf("unattributed %d, want 3", st.UnattributedInbound)
		}
	})

	t.Run("an inbound message releases the text held for its closed window", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const customer, other = "+15551234567", "+15557654321"
		// putBack claims the only due row and puts it back as the drain
		// does, with lastErr and due in an hour.
		putBack := func(id, lastErr string) {
			t.Helper()
			cs := must[[]store.Claimed](t)(w.s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10}))
			if len(cs) != 1 || cs[0].ID != id {
				t.Fatalf("claimed %+v, want only %s", cs, id)
			}
			must[*store.Message](t)(w.s.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sending,
				LeaseOwner: "drain-1", Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, NoCall: true,
				LastError: lastErr, NextAttemptAt: w.clk.Now().Add(time.Hour)}))
		}
		row := func(key, to, identity, lastErr string) *store.Message {
			t.Helper()
			p := Params(key)
			p.To, p.Identity, p.Payload = to, identity, store.Payload{Text: "your order has shipped"}
			m := must[*store.EnqueueResult](t)(w.s.MessageEnqueue(ctx, &p)).Message
			putBack(m.ID, lastErr)
			return w.get(m.ID)
		}
		held := row("held", customer, "sim", store.WindowHeld)
		limited := row("limited", customer, "sim", "429: rate limited") // waiting for another reason
		elsewhere := row("elsewhere", other, "sim", store.WindowHeld)   // another customer's window
		shop := row("shop", customer, "shop", store.WindowHeld)         // the same customer's window with another identity
		hist := len(must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, held.ID)))

		w.clk.Advance(time.Minute)
		now := w.clk.Now().Truncate(store.Resolution)
		in := inbound("in-1", customer, "", 60)
		if res := w.ingest(nil, []store.Inbound{in}); res.Inbound != 1 || res.Released != 1 {
			t.Errorf("ingest %+v, want one inbound and one row released", res)
		}
		got := w.get(held.ID)
		if got.State != state.Queued || !got.NextAttemptAt.Equal(now) || got.LastError != store.WindowHeld {
			t.Errorf("held row after the customer wrote: %s next %v last_error %q, want queued, due at %v",
				got.State, got.NextAttemptAt, got.LastError, now)
		}
		if n := len(must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, held.ID))); n != hist {
			t.Errorf("history %d entries, want %d: a release is scheduling, not a transition", n, hist)
		}
		for _, m := range []*store.Message{limited, elsewhere, shop} {
			if got := w.get(m.ID); !got.NextAttemptAt.Equal(m.NextAttemptAt) || got.State != state.Queued {
				t.Errorf("%s (%s, %s, %q) moved to %v, want it left at %v", m.Key, m.To, m.Identity, m.LastError,
					got.NextAttemptAt, m.NextAttemptAt)
			}
		}

		// Held again (the drain claims it now; say the window is still
		// closed for it): a redelivery of that inbound message is a
		// duplicate and releases nothing, a new one releases it again.
		putBack(held.ID, store.WindowHeld)
		heldAgain := w.get(held.ID)
		if res := w.ingest(nil, []store.Inbound{in}); res.Duplicates != 1 || res.Released != 0 {
			t.Errorf("duplicate ingest %+v, want a duplicate that releases nothing", res)
		}
		if got := w.get(held.ID); !got.NextAttemptAt.Equal(heldAgain.NextAttemptAt) {
			t.Errorf("a duplicate inbound message released the row: due %v, want %v", got.NextAttemptAt, heldAgain.NextAttemptAt)
		}
		if res := w.ingest(nil, []store.Inbound{inbound("in-2", customer, "", 61)}); res.Released != 1 {
			t.Errorf("second inbound %+v, want the row released again", res)
		}
		if cs := must[[]store.Claimed](t)(w.s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10})); len(cs) != 1 || cs[0].ID != held.ID {
			t.Errorf("claimed %+v, want only the released row %s", cs, held.ID)
		}
	})

	t.Run("statuses in any order end in the highest, the others recorded", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		orders := [][]state.State{
			{state.Sent, state.Delivered, state.Read}, {state.Sent, state.Read, state.Delivered},
			{state.Delivered, state.Sent, state.Read}, {state.Delivered, state.Read, state.Sent},
			{state.Read, state.Sent, state.Delivered}, {state.Read, state.Delivered, state.Sent},
		}
		sec := map[state.State]int{state.Sent: 1, state.Delivered: 2, state.Read: 3}
		for i, order := range orders {
			pid := fmt.Sprintf("wamid.order%d", i)
			m := w.sent(fmt.Sprintf("order-%d", i), pid)
			var got []string
			// Each status is applied as it arrives: arrival order, not
			// provider timestamps, decides what is stale.
			for _, st := range order {
				w.ingest([]store.StatusEvidence{status(pid, st, sec[st])}, nil)
				res := w.apply()
				if len(res.Applied) != 1 || res.Applied[0].MessageID != m.ID || res.Applied[0].ProviderID != pid {
					t.Fatalf("order %v, %s: %+v", order, st, res)
				}
				got = append(got, res.Applied[0].Outcome)
			}
			row := w.get(m.ID)
			if row.State != state.Read {
				t.Errorf("order %v: row ends %s, want read", order, row.State)
			}
			// A status applies when it ranks above everything before it.
			var want []string
			best := state.Sent
			for _, st := range order {
				if st.Rank() > best.Rank() {
					want, best = append(want, store.EvidenceApplied), st
				} else {
					want = append(want, store.EvidenceRecorded)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("order %v: outcomes %v, want %v", order, got, want)
			}
			hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, m.ID))
			evs := hist[len(hist)-3:]
			for j, hst := range evs {
				if hst.Event != fmt.Sprintf("evidence(%s)", order[j]) || hst.Source != store.SourceWebhook ||
					hst.Applied != (want[j] == store.EvidenceApplied) {
					t.Errorf("order %v: history %d: %+v", order, j, hst)
				}
			}
			list := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, m.ID, 0))
			if len(list) != 3 || list[0].Status != state.Sent || list[1].Status != state.Delivered || list[2].Status != state.Read {
				t.Errorf("order %v: evidence of the row %+v, want sent, delivered, read (by provider time)", order, list)
			}
			for _, e := range list {
				if e.MessageID != m.ID || e.Outcome == "" || e.AppliedAt == nil || !e.AppliedAt.Equal(t0.Truncate(store.Resolution)) {
					t.Errorf("order %v: evidence %+v", order, e)
				}
			}
		}
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 0 || res.Attributed != 0 {
			t.Errorf("applying again: %+v, want nothing", res)
		}
	})

	t.Run("a status applies through the machine with its history detail", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.sent("k", "wamid.X")
		w.clk.Advance(time.Minute)
		w.ingest([]store.StatusEvidence{status("wamid.X", state.Delivered, 0)}, nil)
		res := w.apply()
		if len(res.Applied) != 1 {
			t.Fatalf("applied %+v", res)
		}
		a := res.Applied[0]
		wantDetail := "whatsapp status delivered at 2026-11-29T10:00:00Z (wamid.X)"
		if a.From != state.Sent || a.To != state.Delivered || a.Outcome != store.EvidenceApplied || a.Detail != wantDetail ||
			a.Status != state.Delivered || a.EvidenceID == "" {
			t.Errorf("applied %+v", a)
		}
		hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, m.ID))
		last := hist[len(hist)-1]
		if last.From != state.Sent || last.To != state.Delivered || !last.Applied || last.Detail != wantDetail ||
			last.Source != store.SourceWebhook || !last.At.Equal(w.clk.Now().Truncate(store.Resolution)) {
			t.Errorf("history %+v", last)
		}
		// The explicit time of a run is its transitions' and outcomes' time.
		later := t0.Add(time.Hour)
		w.ingest([]store.StatusEvidence{status("wamid.X", state.Read, 5)}, nil)
		must[*store.ApplyResult](t)(w.s.EvidenceApply(ctx, &store.ApplyParams{Now: later}))
		list := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, m.ID, 0))
		if len(list) != 2 || list[1].AppliedAt == nil || !list[1].AppliedAt.Equal(later.Truncate(store.Resolution)) {
			t.Errorf("evidence %+v", list)
		}
		if got := w.get(m.ID); got.State != state.Read || !got.UpdatedAt.Equal(later.Truncate(store.Resolution)) {
			t.Errorf("row %+v", got)
		}
	})

	t.Run("a failure fails a sent row with its code and error verbatim, and never a delivered one", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		raw := `[{"code":131026,"title":"Message undeliverable","error_data":{"details":"Unable to deliver."}}]`
		failed := func(pid string, sec int) store.StatusEvidence {
			st := status(pid, state.Failed, sec)
			st.ErrorCode, st.Error = "131026", raw
			return st
		}
		a := w.sent("a", "wamid.A")
		b := w.sent("b", "wamid.B")
		w.ingest([]store.StatusEvidence{status("wamid.B", state.Delivered, 1)}, nil)
		w.apply()
		w.ingest([]store.StatusEvidence{failed("wamid.A", 2), failed("wamid.B", 3)}, nil)
		res := w.apply()
		if outcomes(res.Applied) != "failed:sent->failed:applied failed:delivered->delivered:recorded" {
			t.Errorf("outcomes %s", outcomes(res.Applied))
		}
		if d := res.Applied[0].Detail; d != "whatsapp status failed at 2026-11-29T10:00:02Z (wamid.A) error 131026" {
			t.Errorf("detail %q", d)
		}
		ga := w.get(a.ID)
		if ga.State != state.Failed || ga.Reason != state.Permanent || !strings.Contains(ga.LastError, "131026") || !strings.Contains(ga.LastError, raw) {
			t.Errorf("failed row %+v", ga)
		}
		gb := w.get(b.ID)
		if gb.State != state.Delivered || gb.LastError != "" || gb.Reason != "" {
			t.Errorf("a failure after delivery changed the row: %+v", gb)
		}
		hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, b.ID))
		if last := hist[len(hist)-1]; last.Applied || last.Event != "evidence(failed)" || last.To != state.Delivered {
			t.Errorf("stale failure in history: %+v", last)
		}
	})

	t.Run("a status before its provider id is known waits for it", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.claimed("k")
		// The webhook can beat the drain's own record of the answer.
		w.ingest([]store.StatusEvidence{status("wamid.early", state.Delivered, 1)}, nil)
		res := w.apply()
		if len(res.Applied) != 0 || res.Parked != 1 {
			t.Fatalf("before the provider id: %+v", res)
		}
		if st := must[*store.WebhookStats](t)(w.s.WebhookStats(ctx)); st.ParkedEvidence != 1 {
			t.Errorf("parked %d", st.ParkedEvidence)
		}
		w.accept(m.ID, "wamid.early")
		res = w.apply()
		if outcomes(res.Applied) != "delivered:sent->delivered:applied" || res.Parked != 0 {
			t.Errorf("after the provider id: %+v", res)
		}
		if got := w.get(m.ID); got.State != state.Delivered {
			t.Errorf("row %s", got.State)
		}
		if parked := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, "", 0)); len(parked) != 0 {
			t.Errorf("still parked: %+v", parked)
		}
	})

	t.Run("a callback reference settles an unknown row and records its provider id", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.claimed("k")
		must[*store.Message](t)(w.s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending, LeaseOwner: "drain-1",
			Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain}))
		// The reply arrives first; then the read (no reference) and the
		// delivery (with one), in one batch.
		w.ingest(nil, []store.Inbound{inbound("in-1", "+15551234567", "wamid.U", 9)})
		read := status("wamid.U", state.Read, 5)
		delivered := status("wamid.U", state.Delivered, 6)
		delivered.CallbackRef = m.ID
		w.ingest([]store.StatusEvidence{read, delivered}, nil)
		res := w.apply()
		if outcomes(res.Applied) != "delivered:unknown->delivered:applied read:delivered->read:applied" || res.Parked != 0 || res.Attributed != 1 {
			t.Errorf("apply: %s %+v", outcomes(res.Applied), res)
		}
		got := w.get(m.ID)
		if got.State != state.Read || got.ProviderID != "wamid.U" {
			t.Errorf("row %+v", got)
		}
		box := must[[]store.Inbound](t)(w.s.InboxList(ctx, &store.InboxParams{}))
		if len(box) != 1 || box[0].MessageID == nil || *box[0].MessageID != m.ID {
			t.Errorf("the reply was not linked: %+v", box)
		}
		if res := w.apply(); len(res.Applied) != 0 || res.Attributed != 0 {
			t.Errorf("applying again: %+v", res)
		}
	})

	t.Run("a callback reference to a row sent under another provider id is set aside as suspect", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.sent("k", "wamid.mine")
		st := status("wamid.theirs", state.Failed, 1)
		st.CallbackRef = m.ID
		w.ingest([]store.StatusEvidence{st}, nil)
		if res := w.apply(); outcomes(res.Applied) != "failed:->:suspect" || res.Parked != 0 {
			t.Errorf("apply: %s %+v", outcomes(res.Applied), res)
		}
		sus := must[[]store.StatusEvidence](t)(w.s.EvidenceSuspects(whCtx, 0))
		if len(sus) != 1 || sus[0].ProviderID != "wamid.theirs" || !strings.Contains(sus[0].Suspect, "wamid.mine") {
			t.Errorf("suspects %+v", sus)
		}
		if got := w.get(m.ID); got.State != state.Sent || got.ProviderID != "wamid.mine" {
			t.Errorf("row %+v", got)
		}
	})

	t.Run("a status for a row under a live lease waits for the drain", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.claimed("k")
		st := status("wamid.L", state.Sent, 1)
		st.CallbackRef = m.ID
		w.ingest([]store.StatusEvidence{st}, nil)
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 1 {
			t.Errorf("under the lease: %+v", res)
		}
		if got := w.get(m.ID); got.State != state.Sending || got.ProviderID != "" {
			t.Errorf("row %+v", got)
		}
		// The drain vanished: once its lease has expired the status is
		// the answer.
		w.clk.Advance(2 * time.Minute)
		res := w.apply()
		if outcomes(res.Applied) != "sent:sending->sent:applied" || res.Parked != 0 {
			t.Errorf("after the lease: %s %+v", outcomes(res.Applied), res)
		}
		if got := w.get(m.ID); got.State != state.Sent || got.ProviderID != "wamid.L" || got.LeaseOwner != "" {
			t.Errorf("row %+v", got)
		}
	})

	t.Run("parked statuses do not hold back later ones", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		var sts []store.StatusEvidence
		for i := range 5 {
			sts = append(sts, status(fmt.Sprintf("wamid.other%d", i), state.Delivered, i))
		}
		w.ingest(sts, nil)
		m := w.sent("k", "wamid.ours")
		w.ingest([]store.StatusEvidence{status("wamid.ours", state.Delivered, 100)}, nil)
		res := must[*store.ApplyResult](t)(w.s.EvidenceApply(ctx, &store.ApplyParams{Limit: 1}))
		if len(res.Applied) != 1 || res.Applied[0].MessageID != m.ID || res.Parked != 5 {
			t.Errorf("apply with limit 1: %+v", res)
		}
	})

	t.Run("a parked status and an unattributed reply are tried again after an eighth of their age", func(t *testing.T) {
		// A round reads what is due, not every status and reply parked
		// since the store was made (store.DueBatch): each that matched
		// nothing is tried again after an eighth of its age.
		t.Parallel()
		w := newWH(t, h)
		w.ingest([]store.StatusEvidence{status("wamid.late", state.Delivered, 1)},
			[]store.Inbound{inbound("wamid.in.late", "+15551234567", "wamid.late", 2)})
		w.clk.Advance(8 * time.Minute)
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 1 || res.Attributed != 0 {
			t.Fatalf("before the row: %+v", res)
		}
		// Tried 8 minutes after it came: next at 9 minutes. The row
		// gets the provider id meanwhile.
		m := w.sent("k", "wamid.late")
		w.clk.Advance(50 * time.Second)
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 1 || res.Attributed != 0 {
			t.Errorf("tried again before its time: %+v", res)
		}
		w.clk.Advance(15 * time.Second)
		res := w.apply()
		if len(res.Applied) != 1 || res.Applied[0].MessageID != m.ID || res.Parked != 0 || res.Attributed != 1 {
			t.Errorf("at its time: %+v", res)
		}
		if got := w.get(m.ID); got.State != state.Delivered {
			t.Errorf("row %s, want delivered", got.State)
		}
	})

	t.Run("a limit bounds one run and the next takes the rest", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		var sts []store.StatusEvidence
		for i := range 3 {
			pid := fmt.Sprintf("wamid.%d", i)
			w.sent(fmt.Sprintf("k%d", i), pid)
			sts = append(sts, status(pid, state.Delivered, 3-i))
		}
		w.ingest(sts, nil)
		first := must[*store.ApplyResult](t)(w.s.EvidenceApply(ctx, &store.ApplyParams{Limit: 2}))
		if len(first.Applied) != 2 || first.Applied[0].ProviderID != "wamid.2" || first.Applied[1].ProviderID != "wamid.1" {
			t.Errorf("first run: %+v, want the two oldest statuses", first.Applied)
		}
		if second := w.apply(); len(second.Applied) != 1 || second.Applied[0].ProviderID != "wamid.0" {
			t.Errorf("second run: %+v", second.Applied)
		}
	})

	t.Run("a status the machine refuses is marked refused and changes nothing", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.sent("k", "wamid.R")
		w.ingest([]store.StatusEvidence{status("wamid.R", state.Queued, 1)}, nil)
		res := w.apply()
		if len(res.Applied) != 1 || res.Applied[0].Outcome != store.EvidenceRefused || !strings.Contains(res.Applied[0].Detail, "evidence is") {
			t.Fatalf("apply: %+v", res)
		}
		if got := w.get(m.ID); got.State != state.Sent {
			t.Errorf("row %s", got.State)
		}
		if hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, m.ID)); len(hist) != 3 {
			t.Errorf("a refusal wrote history: %+v", hist)
		}
		list := must[[]store.StatusEvidence](t)(w.s.EvidenceList(ctx, m.ID, 0))
		if len(list) != 1 || list[0].Outcome != store.EvidenceRefused {
			t.Errorf("evidence %+v", list)
		}
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 0 {
			t.Errorf("again: %+v", res)
		}
	})

	t.Run("concurrent runs apply each status once", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const n = 30
		var ids []string
		var sts []store.StatusEvidence
		for i := range n {
			pid := fmt.Sprintf("wamid.%d", i)
			ids = append(ids, w.sent(fmt.Sprintf("k%d", i), pid).ID)
			sts = append(sts, status(pid, state.Delivered, i), status(pid, state.Read, i+1))
		}
		w.ingest(sts, nil)
		handles := []store.Store{w.s, h.Reopen(t, w.s), h.Reopen(t, w.s)}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := handles[i%len(handles)].EvidenceApply(ctx, &store.ApplyParams{Limit: 7})
				if err != nil {
					t.Errorf("apply %d: %v", i, err)
					return
				}
				mu.Lock()
				for _, a := range r.Applied {
					seen[a.EvidenceID]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		for len(seen) < 2*n {
			r := w.apply()
			if len(r.Applied) == 0 {
				break
			}
			for _, a := range r.Applied {
				seen[a.EvidenceID]++
			}
		}
		for id, k := range seen {
			if k != 1 {
				t.Errorf("status %s applied %d times", id, k)
			}
		}
		if len(seen) != 2*n {
			t.Errorf("%d statuses applied, want %d", len(seen), 2*n)
		}
		for _, id := range ids {
			hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(ctx, id))
			var evs []string
			for _, hst := range hist {
				if hst.Source == store.SourceWebhook {
					evs = append(evs, hst.Event)
				}
			}
			sort.Strings(evs)
			if fmt.Sprint(evs) != "[evidence(delivered) evidence(read)]" {
				t.Errorf("%s: webhook history %v", id, evs)
			}
			if got := w.get(id); got.State != state.Read {
				t.Errorf("%s ends %s", id, got.State)
			}
		}
	})
}
