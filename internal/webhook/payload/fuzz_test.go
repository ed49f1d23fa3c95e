package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func seedFixtures(f *testing.F, dir string, add func(body []byte)) {
	files, err := filepath.Glob(filepath.Join(fixtures, dir, "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no fixtures in %s: %v", dir, err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		add(b)
	}
}

// checkInvariants holds for any body: a parse either fails with
// ErrMalformed and nothing else, or gives items the store can take as they
// are.
func checkInvariants(t *testing.T, body []byte, provider string, b *Batch, err error) {
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v is not ErrMalformed", err)
		}
		if b != nil {
			t.Fatalf("a batch came with the error %v", err)
		}
		return
	}
	if b == nil {
		t.Fatal("nil batch and nil error")
	}
	for i, s := range b.Statuses {
		switch s.Status {
		case state.Sent, state.Delivered, state.Read, state.Failed:
		default:
			t.Fatalf("status %d: state %q", i, s.Status)
		}
		if !s.Status.Valid() || s.ProviderID == "" || s.DedupeKey == "" || s.Provider != provider {
			t.Fatalf("status %d: %+v", i, s)
		}
		if s.At.IsZero() {
			t.Fatalf("status %d: no time", i)
		}
		if s.Status != state.Failed && (s.Error != "" || s.ErrorCode != "") {
			t.Fatalf("status %d: an error on a %s status", i, s.Status)
		}
		// Verbatim means a piece of the body, not a rendering of it.
		if !bytes.Contains(body, []byte(s.Error)) || !utf8.ValidString(s.Error) {
			t.Fatalf("status %d: Error %q is not verbatim from the body", i, s.Error)
		}
	}
	for i, m := range b.Inbound {
		if m.ProviderMessageID == "" || len(m.From) < 2 || m.From[0] != '+' || !e164(m.From) || m.Provider != provider {
			t.Fatalf("inbound %d: %+v", i, m)
		}
	}
	if b.storable() != nil {
		t.Fatal("a NUL character in a kept field")
	}
	// The store writes these as JSON (and times as RFC 3339): anything the
	// parser accepts must survive that.
	if _, err := json.Marshal(b); err != nil {
		t.Fatalf("batch does not marshal: %v", err)
	}
}

func FuzzWhatsApp(f *testing.F) {
	seedFixtures(f, "whatsapp", func(b []byte) { f.Add(b) })
	for _, tt := range malformedWhatsApp {
		f.Add([]byte(tt.body))
	}
	f.Add([]byte(waMsg(`{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"location","location":{"latitude":1,"longitude":2}}`)))
	f.Add([]byte(waMsg(`{"from":"16505551234","id":"wamid.TEST1","timestamp":1795946600,"type":"reaction","reaction":{"emoji":"x"}}`)))
	f.Add([]byte(waStatusBody(`{"id":"wamid.TEST1","status":"played","timestamp":"1795946600"}`)))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := WhatsApp(body)
		checkInvariants(t, body, store.WebhookWhatsApp, b, err)
	})
}

func FuzzHTTP(f *testing.F) {
	seedFixtures(f, "http", func(b []byte) {
		f.Add(b, "")
		f.Add(b, "msg_2QJ4bW7yX8")
	})
	for _, tt := range malformedHTTP {
		f.Add([]byte(tt.body), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, webhookID string) {
		b, err := HTTP(body, webhookID)
		checkInvariants(t, body, store.WebhookHTTP, b, err)
	})
}
