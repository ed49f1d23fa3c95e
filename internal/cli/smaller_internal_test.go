package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// runIn runs one msgq invocation in this process and returns its streams
// and exit code.
func runIn(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), code
}

// TestShowTablePrintsMaybeSent pins issue 13: the show table omitted
// maybe_sent, the flag an operator needs before a resend.
func TestShowTablePrintsMaybeSent(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for maybe, want := range map[bool]string{true: `maybe sent:\s+yes \(an earlier call's answer was lost`, false: `maybe sent:\s+no\n`} {
		var out bytes.Buffer
		a := &app{ios: &IOStreams{Out: &out}}
		m := &store.Message{ID: "01J", Key: "k", State: state.Queued, MaybeSent: maybe, Payload: &store.Payload{Text: "x"},
			CreatedAt: now, UpdatedAt: now, NextAttemptAt: now}
		if err := printShow(a, m, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("maybe_sent %v: show printed\n%s", maybe, out.String())
		}
	}
}

// TestListSaysHowManyMoreAndPagesWithBefore pins issue 13: list stopped at
// 100 rows without saying so.
func TestListSaysHowManyMoreAndPagesWithBefore(t *testing.T) {
	// Not parallel: t.Setenv.
	dir := t.TempDir()
	env := []string{"MSGQ_STORE=sqlite:" + filepath.Join(dir, "q.db"), "MSGQ_CONFIG=", "XDG_CONFIG_HOME=" + dir}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if _, errs, code := runIn(t, env, "send", "--key", k, "--to", "+15551234567", "--text", k); code != 0 {
			t.Fatalf("send %s: exit %d: %s", k, code, errs)
		}
	}
	out, errs, code := runIn(t, env, "list", "--limit", "2", "-o", "json")
	var page []store.Message
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page) != 2 {
		t.Fatalf("list --limit 2: exit %d, %s %s", code, out, errs)
	}
	last := page[1].ID
	want := "list: 2 rows shown, 3 more; the next page: the same command with --before " + last + " (or a larger --limit)\n"
	if errs != want {
		t.Fatalf("stderr %q, want %q", errs, want)
	}
	out, errs, code = runIn(t, env, "list", "--limit", "2", "--before", last, "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page) != 2 || page[0].Key != "c" || page[1].Key != "b" {
		t.Fatalf("the second page: exit %d, %s %s", code, out, errs)
	}
	if !strings.Contains(errs, "2 rows shown, 1 more") {
		t.Fatalf("the second page's stderr: %q", errs)
	}
	out, errs, code = runIn(t, env, "list", "--limit", "2", "--before", page[1].ID)
	if code != 0 || errs != "" || !strings.Contains(out, " a ") {
		t.Fatalf("the last page: exit %d, %q %q", code, out, errs)
	}
	// A full page with nothing after it says nothing.
	if _, errs, _ := runIn(t, env, "list", "--limit", "5"); errs != "" {
		t.Fatalf("a full last page: stderr %q", errs)
	}
}

// TestSendRefusesInvalidUTF8AndAcceptsABOM pins issue 13: invalid UTF-8 in
// --text was silently replaced with U+FFFD; a UTF-8 byte-order mark on the
// first line of a --file was refused as malformed JSON.
func TestSendRefusesInvalidUTF8AndAcceptsABOM(t *testing.T) {
	dir := t.TempDir()
	env := []string{"MSGQ_STORE=sqlite:" + filepath.Join(dir, "q.db"), "MSGQ_CONFIG=", "XDG_CONFIG_HOME=" + dir}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--text", "caf\xe9"}, "msgq: text: is not valid UTF-8 (at byte 4)\n"},
		{[]string{"--template", "t", "--param", "ok", "--param", "\xff"}, "msgq: params: parameter 2 is not valid UTF-8 (at byte 1)\n"},
	} {
		args := append([]string{"send", "--key", "u1", "--to", "+15551234567"}, c.args...)
		out, errs, code := runIn(t, env, args...)
		if code != ExitUsage || out != "" || errs != c.want {
			t.Errorf("send %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
	file := filepath.Join(dir, "in.jsonl")
	body := "\xEF\xBB\xBF" + `{"key": "bom1", "to": "+15551234567", "text": "hi"}` + "\n" +
		`{"key": "bad1", "to": "+15551234567", "text": "caf` + "\xe9" + `"}` + "\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runIn(t, env, "send", "--file", file, "-o", "json")
	if code != ExitUsage {
		t.Fatalf("send --file: exit %d (want 2: one line was bad): %s %s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"key":"bom1"`) || strings.Contains(lines[0], "invalid") ||
		!strings.Contains(lines[1], `"result":"invalid"`) || !strings.Contains(lines[1], "not valid UTF-8 (at byte 51 of the line)") {
		t.Fatalf("send --file results:\n%s", out)
	}
	// Nothing invalid was stored, and no U+FFFD anywhere.
	out, _, _ = runIn(t, env, "list", "-o", "json")
	if strings.Contains(out, "bad1") || strings.Contains(out, "u1") || strings.Contains(out, "\uFFFD") || !strings.Contains(out, "bom1") {
		t.Fatalf("list after the refusals: %s", out)
	}
}

// TestMoreJSONFieldsArePinned pins the -o json of webhook parked,
// unreadable and show, migrate, version and identities pause/resume
// (docs/json.md), which issue 13 found undocumented.
func TestMoreJSONFieldsArePinned(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"a parked status", store.StatusEvidence{}, []string{"applied_at", "at", "callback_ref", "dedupe_key", "error",
			"error_code", "event_id", "id", "identity", "message_id", "outcome", "provider", "provider_id", "received_at", "recipient", "status", "suspect"}},
		{"a stored delivery", store.WebhookEvent{Items: 1, Replayed: true}, []string{"body", "dedupe_key", "error", "headers", "id", "identity",
			"processed_at", "provider", "received_at"}},
	} {
		if got := jsonKeys(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JSON fields %v, want %v", tc.name, got, tc.want)
		}
	}
	dir := t.TempDir()
	env := []string{"MSGQ_STORE=sqlite:" + filepath.Join(dir, "q.db"), "MSGQ_CONFIG=", "XDG_CONFIG_HOME=" + dir}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"migrate", "-o", "json"}, []string{"applied", "provider_id_collisions", "store"}},
		{[]string{"version", "-o", "json"}, []string{"commit", "date", "go_version", "platform", "version"}},
		{[]string{"identities", "pause", "sim", "-o", "json"}, []string{"name", "paused"}},
		{[]string{"identities", "resume", "sim", "-o", "json"}, []string{"name", "paused"}},
	} {
		out, errs, code := runIn(t, env, c.args...)
		var m map[string]json.RawMessage
		if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
			t.Fatalf("msgq %q: exit %d: %s %s", c.args, code, out, errs)
		}
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("msgq %q: JSON fields %v, want %v", c.args, got, c.want)
		}
	}
}
