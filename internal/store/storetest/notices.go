package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// ingestNotices stores an event carrying ns and ingests it.
func (w *wh) ingestNotices(ns []store.Notice, siblings map[string][]string) *store.IngestResult {
	w.t.Helper()
	return must[*store.IngestResult](w.t)(w.s.WebhookIngest(whCtx, []store.IngestParams{{EventID: w.event(), Notices: ns,
		TemplateIdentities: siblings}}))
}

func templateNotice(identity, name, lang, status string, sec int) store.Notice {
	return store.Notice{Provider: store.WebhookWhatsApp, Identity: identity, Kind: store.NoticeTemplate,
		Field: "message_template_status_update", Subject: name, Lang: lang, Value: status,
		Detail: `{"event":"` + status + `"}`, DedupeKey: name + "|" + status + "|" + at(sec).String(), At: at(sec)}
}

// testNotices: nothing a provider says is dropped without a trace (issue
// 13 §3).
func testNotices(t *testing.T, h Harness) {
	t.Run("notices are kept once, listed by kind and counted, the unknown ones too", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		ns := []store.Notice{
			{Provider: store.WebhookWhatsApp, Identity: "shop", Kind: store.NoticeError, Field: "errors", Code: "130429",
				Value: "Rate limit hit", Detail: `{"code":130429}`, DedupeKey: "e1", At: at(1)},
			{Provider: store.WebhookWhatsApp, Identity: "shop", Kind: store.NoticeUnknown, Field: "flows",
				Value: "FLOW_STATUS_CHANGE", Detail: `{"event":"FLOW_STATUS_CHANGE"}`, DedupeKey: "u1"},
		}
		res := w.ingestNotices(ns, nil)
		if res.Notices != 2 || res.Duplicates != 0 {
			t.Fatalf("ingest %+v", res)
		}
		if res := w.ingestNotices(ns, nil); res.Notices != 0 || res.Duplicates != 2 {
			t.Errorf("a redelivery: %+v, want 2 duplicates", res)
		}
		all := must[[]store.Notice](t)(w.s.NoticeList(whCtx, "", 0))
		if len(all) != 2 {
			t.Fatalf("notices %+v", all)
		}
		unk := must[[]store.Notice](t)(w.s.NoticeList(whCtx, store.NoticeUnknown, 0))
		if len(unk) != 1 || unk[0].Field != "flows" || unk[0].Detail != `{"event":"FLOW_STATUS_CHANGE"}` || !unk[0].At.IsZero() ||
			unk[0].ID == "" || unk[0].EventID == "" || unk[0].ReceivedAt.IsZero() {
			t.Errorf("unknown %+v", unk)
		}
		errs := must[[]store.Notice](t)(w.s.NoticeList(whCtx, store.NoticeError, 0))
		if len(errs) != 1 || errs[0].Code != "130429" || !errs[0].At.Equal(at(1)) {
			t.Errorf("errors %+v", errs)
		}
		ws := must[*store.WebhookStats](t)(w.s.WebhookStats(whCtx))
		if ws.Notices != 2 || ws.UnknownNotices != 1 {
			t.Errorf("stats %+v", ws)
		}
	})

	t.Run("an identity-level error pauses its identity once; a redelivery does not pause it again", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		n := store.Notice{Provider: store.WebhookWhatsApp, Identity: "shop", Kind: store.NoticeError, Field: "errors",
			Code: "131031", Value: "Account has been locked", DedupeKey: "lock", PauseReason: "whatsapp webhook error 131031: Account has been locked"}
		if res := w.ingestNotices([]store.Notice{n}, nil); res.Paused != 1 {
			t.Fatalf("ingest %+v", res)
		}
		ids := must[[]store.IdentityState](t)(w.s.IdentityStates(whCtx))
		if len(ids) != 1 || !ids[0].Paused || !strings.Contains(ids[0].Reason, "131031") {
			t.Fatalf("identities %+v", ids)
		}
		if err := w.s.IdentityResume(whCtx, "shop"); err != nil {
			t.Fatal(err)
		}
		if res := w.ingestNotices([]store.Notice{n}, nil); res.Paused != 0 || res.Duplicates != 1 {
			t.Errorf("redelivery %+v", res)
		}
		if ids := must[[]store.IdentityState](t)(w.s.IdentityStates(whCtx)); ids[0].Paused {
			t.Error("a redelivered error paused the identity an operator resumed")
		}
	})

	t.Run("a paused template holds its queued rows on every identity of the account until approved again", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		enq := func(key, identity, tpl, lang string) *store.Message {
			p := Params(key)
			p.Identity, p.Payload.Template, p.Payload.Lang = identity, tpl, lang
			return must[*store.EnqueueResult](t)(w.s.MessageEnqueue(whCtx, &p)).Message
		}
		a := enq("a", "shop", "order_update", "en_US")
		b := enq("b", "shop-2", "order_update", "en_US")
		other := enq("c", "shop", "receipt", "en_US")
		otherLang := enq("d", "shop", "order_update", "de")
		far := enq("e", "elsewhere", "order_update", "en_US")
		siblings := map[string][]string{"shop": {"shop", "shop-2"}}
		res := w.ingestNotices([]store.Notice{templateNotice("shop", "order_update", "en_US", "PAUSED", 1)}, siblings)
		if res.TemplateHeld != 2 {
			t.Fatalf("ingest %+v, want 2 rows held", res)
		}
		for _, m := range []*store.Message{a, b} {
			got := w.get(m.ID)
			if got.State != state.Queued || got.LastError != store.TemplateHeldError("order_update", "en_US") ||
				got.NextAttemptAt.Before(w.clk.Now().Add(50*time.Minute)) {
				t.Errorf("held row %+v", got)
			}
		}
		for _, m := range []*store.Message{other, otherLang, far} {
			if got := w.get(m.ID); got.LastError != "" {
				t.Errorf("row %s of another template, language or account was held: %+v", m.Key, got)
			}
		}
		holds := must[[]store.TemplateHold](t)(w.s.TemplateHolds(whCtx))
		if len(holds) != 2 || holds[0].Identity != "shop" || holds[1].Identity != "shop-2" || holds[0].Held != 1 ||
			holds[0].Status != "PAUSED" || holds[0].Template != "order_update" || holds[0].Lang != "en_US" {
			t.Errorf("holds %+v", holds)
		}
		ws := must[*store.WebhookStats](t)(w.s.WebhookStats(whCtx))
		if ws.TemplateHolds != 2 || ws.TemplateHeldRows != 2 {
			t.Errorf("stats %+v", ws)
		}
		// A claim now takes only the rows no hold put back.
		cs := must[[]store.Claimed](t)(w.s.MessageClaim(whCtx, &store.ClaimParams{Owner: "d", LeaseFor: time.Minute, Limit: 10}))
		for _, c := range cs {
			if c.ID == a.ID || c.ID == b.ID {
				t.Errorf("a held row was claimed: %s", c.Key)
			}
		}
		w.clk.Advance(time.Second)
		res = w.ingestNotices([]store.Notice{templateNotice("shop", "order_update", "en_US", "APPROVED", 2)}, siblings)
		if res.TemplateReleased != 2 {
			t.Fatalf("release %+v", res)
		}
		for _, m := range []*store.Message{a, b} {
			got := w.get(m.ID)
			if got.NextAttemptAt.After(w.clk.Now()) || strings.HasPrefix(got.LastError, store.TemplateHeldPrefix) {
				t.Errorf("released row %+v", got)
			}
		}
		if holds := must[[]store.TemplateHold](t)(w.s.TemplateHolds(whCtx)); len(holds) != 0 {
			t.Errorf("holds after approval %+v", holds)
		}
		ws = must[*store.WebhookStats](t)(w.s.WebhookStats(whCtx))
		if ws.TemplateHolds != 0 || ws.TemplateHeldRows != 0 {
			t.Errorf("stats %+v", ws)
		}
		// Meta's order is not guaranteed: a PAUSED older than the APPROVED
		// (a late redelivery) must not hold the approved template again.
		stale := templateNotice("shop", "order_update", "en_US", "PAUSED", 1)
		stale.DedupeKey += "|redelivered"
		if res := w.ingestNotices([]store.Notice{stale}, siblings); res.Notices != 1 || res.TemplateHeld != 0 {
			t.Errorf("a stale PAUSED: %+v", res)
		}
		if holds := must[[]store.TemplateHold](t)(w.s.TemplateHolds(whCtx)); len(holds) != 0 {
			t.Errorf("a stale PAUSED held the template again: %+v", holds)
		}
		if got := w.get(a.ID); strings.HasPrefix(got.LastError, store.TemplateHeldPrefix) {
			t.Errorf("a stale PAUSED held a row again: %+v", got)
		}
	})
}
