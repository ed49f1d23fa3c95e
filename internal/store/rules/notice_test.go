package rules

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

func TestNoticeHoldsAndReleasesTemplates(t *testing.T) {
	now := t0.Add(time.Hour)
	p := &store.IngestParams{TemplateIdentities: map[string][]string{"waba": {"main", "alt"}}}
	n := &store.Notice{Kind: store.NoticeTemplate, Identity: "waba", Subject: "promo", Lang: "en", Value: "PAUSED", At: t0.Add(1500 * time.Nanosecond)}
	s := Notice(n, p, now)
	h := s.Template
	if s.Pause || h == nil || !h.Hold || h.Status != "PAUSED" || len(h.Identities) != 2 || h.Identities[1] != "alt" {
		t.Fatalf("hold: %+v %+v", s, h)
	}
	if at := t0.Add(time.Microsecond); !s.At.Equal(at) || !h.Since.Equal(at) {
		t.Fatalf("at %v, since %v", s.At, h.Since)
	}
	if h.Marker != store.TemplateHeldError("promo", "en") || !h.HoldUntil.Equal(now.Add(store.TemplateHoldFor)) || h.Note != "" {
		t.Fatalf("hold: %+v", h)
	}

	// Approved again, without a provider time: released at the ingest's.
	n.Value, n.At, n.Identity = "APPROVED", time.Time{}, "main"
	s = Notice(n, p, now)
	r := s.Template
	if r == nil || r.Hold || !s.At.IsZero() || !r.Since.Equal(now) || len(r.Identities) != 1 || r.Identities[0] != "main" ||
		r.Marker != h.Marker || r.Note != store.TemplateReleasedNote("promo", "en", "APPROVED") {
		t.Fatalf("release: %+v %+v", s, r)
	}
}

func TestNoticeOthersHoldNothing(t *testing.T) {
	for _, n := range []store.Notice{
		{Kind: store.NoticeTemplate, Identity: "main", Subject: "promo", Value: "FLAGGED"},
		{Kind: store.NoticeAccount, Identity: "main", Value: "PAUSED"},
	} {
		if s := Notice(&n, &store.IngestParams{}, t0); s.Template != nil || s.Pause {
			t.Fatalf("%+v: %+v", n, s)
		}
	}
	// A pause needs a reason and an identity.
	n := store.Notice{Kind: store.NoticeError, Identity: "main", PauseReason: "token expired"}
	if !Notice(&n, &store.IngestParams{}, t0).Pause {
		t.Fatal("not paused")
	}
	n.Identity = ""
	if Notice(&n, &store.IngestParams{}, t0).Pause {
		t.Fatal("paused no identity")
	}
}
