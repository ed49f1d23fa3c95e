package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// are (and skips the others, naming them).
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
		checkIDs(t, fmt.Sprintf("status %d", i), s.ProviderID, s.DedupeKey, s.CallbackRef)
		checkNoNUL(t, fmt.Sprintf("status %d", i), s.DedupeKey, s.ProviderID, s.CallbackRef, s.ErrorCode, s.Error, s.PhoneNumberID)
	}
	for i, m := range b.Inbound {
		if m.ProviderMessageID == "" || m.Provider != provider || m.ReceivedAt.IsZero() {
			t.Fatalf("inbound %d: %+v", i, m)
		}
		// E.164, or nothing: a WhatsApp user may hide their number.
		if !e164(m.From) && (m.From != "" || provider != store.WebhookWhatsApp) {
			t.Fatalf("inbound %d: from %q", i, m.From)
		}
		checkIDs(t, fmt.Sprintf("inbound %d", i), m.ProviderMessageID, m.ReplyID, m.ContextID)
		checkNoNUL(t, fmt.Sprintf("inbound %d", i), m.ProviderMessageID, m.From, m.Type, m.Text, m.ReplyID, m.ReplyTitle, m.ContextID, m.PhoneNumberID)
	}
	for _, s := range append(append([]string(nil), b.Invalid...), b.Ignored...) {
		if s == "" || !utf8.ValidString(s) {
			t.Fatalf("item text %q", s)
		}
	}
	// The store writes these as JSON (and times as RFC 3339): anything the
	// parser accepts must survive that.
	if _, err := json.Marshal(b); err != nil {
		t.Fatalf("batch does not marshal: %v", err)
	}
}

// checkIDs: indexed values fit a btree index row.
func checkIDs(t *testing.T, what string, ids ...string) {
	for _, id := range ids {
		if len(id) > MaxID {
			t.Fatalf("%s: an id of %d bytes", what, len(id))
		}
	}
}

// checkNoNUL: PostgreSQL text holds no NUL.
func checkNoNUL(t *testing.T, what string, fields ...string) {
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			t.Fatalf("%s: a NUL character in %q", what, f)
		}
	}
}

func FuzzWhatsApp(f *testing.F) {
	seedFixtures(f, "whatsapp", func(b []byte) { f.Add(b) })
	for _, tt := range malformedWhatsApp {
		f.Add([]byte(tt.body))
	}
	for _, tt := range invalidWhatsApp {
		f.Add([]byte(wa(`"statuses":[` + goodStatus + "," + tt.status + `],"messages":[` + tt.msg + "," + goodMessage + `]`)))
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
	for _, tt := range invalidHTTP {
		f.Add([]byte(tt.body), tt.webhookID)
	}
	f.Fuzz(func(t *testing.T, body []byte, webhookID string) {
		b, err := HTTP(body, webhookID)
		checkInvariants(t, body, store.WebhookHTTP, b, err)
	})
}
