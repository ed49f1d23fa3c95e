package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// fakeNotices is a NoticeWriter that records the statements WriteNotice
// asks for and answers as a store whose rows it is told.
type fakeNotices struct {
	calls    []string
	held     bool            // the notice's key is held already
	heldBy   string          // by this event
	stale    map[string]bool // identities with a later template status
	rows     int             // rows each hold or release changes
	failOn   string          // the call that fails
	insertAt time.Time
}

var errFake = errors.New("fake fault")

func (f *fakeNotices) call(c string) error {
	f.calls = append(f.calls, c)
	if f.failOn != "" && strings.HasPrefix(c, f.failOn) {
		return errFake
	}
	return nil
}

func (f *fakeNotices) InsertNotice(id string, n *store.Notice, at time.Time) (bool, error) {
	f.insertAt = at
	return !f.held, f.call("insert " + id)
}

func (f *fakeNotices) NoticeHeldBy(n *store.Notice) (string, error) {
	return f.heldBy, f.call("held-by " + n.DedupeKey)
}

func (f *fakeNotices) Pause(identity, reason string) error {
	return f.call("pause " + identity + ": " + reason)
}

func (f *fakeNotices) TemplateStatus(identity string, t *TemplateStep, noticeID string) (bool, error) {
	return !f.stale[identity], f.call(fmt.Sprintf("status %s %s/%s %s by %s", identity, t.Template, t.Lang, t.Status, noticeID))
}

func (f *fakeNotices) HoldRows(identity string, t *TemplateStep) (int, error) {
	return f.rows, f.call("hold " + identity + " " + t.Marker)
}

func (f *fakeNotices) ReleaseRows(identity string, t *TemplateStep) (int, error) {
	return f.rows, f.call("release " + identity + " " + t.Marker)
}

func TestRereadIsTheSameEventsEarlierWrite(t *testing.T) {
	for _, c := range []struct {
		heldBy, event string
		writtenNow    bool
		want          bool
	}{
		{"e1", "e1", false, true},  // WebhookRetry: the event read again
		{"e0", "e1", false, false}, // a redelivery in another event
		{"e1", "e1", true, false},  // twice in this very ingest
		{"", "e1", false, false},
	} {
		if got := Reread(c.heldBy, c.event, c.writtenNow); got != c.want {
			t.Errorf("Reread(%q, %q, %v) = %v, want %v", c.heldBy, c.event, c.writtenNow, got, c.want)
		}
	}
	var res store.IngestResult
	CountRefused(&res, 5, 2)
	CountRefusedOne(&res, true)
	CountRefusedOne(&res, false)
	if res.Reread != 3 || res.Duplicates != 4 || res.Statuses != 0 || res.Notices != 0 {
		t.Fatalf("counted %+v, want 3 rereads and 4 duplicates", res)
	}
}

func TestWriteNoticeOfAHeldKeyOnlyCounts(t *testing.T) {
	p := &store.IngestParams{EventID: "e1"}
	n := &store.Notice{Kind: store.NoticeError, Identity: "main", PauseReason: "token expired", DedupeKey: "d1"}
	for heldBy, want := range map[string]store.IngestResult{"e1": {Reread: 1}, "e0": {Duplicates: 1}} {
		f := &fakeNotices{held: true, heldBy: heldBy}
		var res store.IngestResult
		if err := WriteNotice(f, "n1", n, p, t0, &res); err != nil {
			t.Fatal(err)
		}
		if res != want {
			t.Errorf("held by %s: %+v, want %+v", heldBy, res, want)
		}
		if w := []string{"insert n1", "held-by d1"}; !reflect.DeepEqual(f.calls, w) {
			t.Errorf("held by %s: wrote %q, want %q (no pause)", heldBy, f.calls, w)
		}
	}
}

func TestWriteNoticePausesThenHoldsWhereTheStatusIsNew(t *testing.T) {
	now := t0.Add(time.Hour)
	p := &store.IngestParams{EventID: "e1", TemplateIdentities: map[string][]string{"waba": {"main", "alt", "old"}}}
	n := &store.Notice{Kind: store.NoticeTemplate, Identity: "waba", Subject: "promo", Lang: "en", Value: "PAUSED",
		PauseReason: "template paused", At: t0.Add(1500 * time.Nanosecond)}
	f := &fakeNotices{stale: map[string]bool{"alt": true}, rows: 2}
	var res store.IngestResult
	if err := WriteNotice(f, "n1", n, p, now, &res); err != nil {
		t.Fatal(err)
	}
	m := store.TemplateHeldError("promo", "en")
	want := []string{
		"insert n1",
		"pause waba: template paused",
		"status main promo/en PAUSED by n1", "hold main " + m,
		"status alt promo/en PAUSED by n1", // a later status: alt's rows stay as they are
		"status old promo/en PAUSED by n1", "hold old " + m,
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Fatalf("wrote\n%q\nwant\n%q", f.calls, want)
	}
	if !f.insertAt.Equal(t0.Add(time.Microsecond)) {
		t.Errorf("at column %v, want the provider's time at the store's resolution", f.insertAt)
	}
	if w := (store.IngestResult{Notices: 1, Paused: 1, TemplateHeld: 4}); res != w {
		t.Errorf("counted %+v, want %+v", res, w)
	}
}

func TestWriteNoticeReleasesAndStopsAtAFault(t *testing.T) {
	p := &store.IngestParams{EventID: "e1"}
	n := &store.Notice{Kind: store.NoticeTemplate, Identity: "main", Subject: "promo", Value: "APPROVED"}
	f := &fakeNotices{rows: 3}
	var res store.IngestResult
	if err := WriteNotice(f, "n1", n, p, t0, &res); err != nil {
		t.Fatal(err)
	}
	m := store.TemplateHeldError("promo", "")
	if w := []string{"insert n1", "status main promo/ APPROVED by n1", "release main " + m}; !reflect.DeepEqual(f.calls, w) {
		t.Errorf("wrote %q, want %q", f.calls, w)
	}
	if !f.insertAt.IsZero() {
		t.Errorf("at column %v, want NULL (the provider gave no time)", f.insertAt)
	}
	if w := (store.IngestResult{Notices: 1, TemplateReleased: 3}); res != w {
		t.Errorf("counted %+v, want %+v", res, w)
	}

	// A fault is returned as it is, and nothing after it is written.
	for _, fail := range []string{"insert", "status", "release"} {
		f := &fakeNotices{failOn: fail}
		if err := WriteNotice(f, "n1", n, p, t0, &store.IngestResult{}); !errors.Is(err, errFake) {
			t.Errorf("%s fails: err %v", fail, err)
		}
		if last := f.calls[len(f.calls)-1]; !strings.HasPrefix(last, fail) {
			t.Errorf("%s fails: wrote on to %q", fail, last)
		}
	}
}
