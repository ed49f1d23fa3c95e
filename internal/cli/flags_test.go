package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/queue"
)

// parseOnly runs msgq's command tree on args with the parse hook set: the
// command's flags are parsed and validated and its options handed back,
// and nothing runs (no store is opened: the test points MSGQ_STORE at a
// path whose directory does not exist and checks nothing appeared).
func parseOnly(t *testing.T, args ...string) (any, error) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("XDG_DATA_HOME", filepath.Join(home, "data"))
	for _, k := range []string{"MSGQ_CONFIG", "MSGQ_TENANT", "MSGQ_OUTPUT", "MSGQ_DEFAULT_IDENTITY", "MSGQ_REGION"} {
		t.Setenv(k, "")
	}
	dbPath := filepath.Join(home, "never", "msgq.db")
	t.Setenv("MSGQ_STORE", "sqlite:"+dbPath)
	var got any
	var out, errOut bytes.Buffer
	a := &app{ios: &IOStreams{In: strings.NewReader(""), Out: &out, Err: &errOut}, now: time.Now,
		parsed: func(o any) error { got = o; return nil }}
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if a.st != nil {
		t.Fatalf("msgq %s opened the store while only parsing flags", strings.Join(args, " "))
	}
	if _, serr := os.Stat(filepath.Dir(dbPath)); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("msgq %s created %s while only parsing flags", strings.Join(args, " "), filepath.Dir(dbPath))
	}
	if out.Len() > 0 {
		t.Fatalf("msgq %s wrote data while only parsing flags: %q", strings.Join(args, " "), out.String())
	}
	return got, err
}

// TestFlagsParseIntoOptions checks, command by command, that flags land in
// the options the command would run with: the flag layer alone, apart from
// behaviour, which the script tests (testdata/script) cover.
func TestFlagsParseIntoOptions(t *testing.T) {
	cases := []struct {
		args []string
		want any
	}{
		{[]string{"send", "--key", "order-1001", "--to", "+15551234567", "--template", "order_update",
			"--param", "Ada", "--param", "1001", "--lane", "reply", "--expires-in", "10m", "--ref", "order:1001"},
			&sendOptions{spec: queue.Spec{Key: "order-1001", To: "+15551234567", Template: "order_update",
				Params: []string{"Ada", "1001"}, Lane: "reply", ExpiresIn: "10m", Ref: "order:1001"},
				set: []string{"key", "to", "template", "param", "ref", "expires-in"}}},
		{[]string{"send", "--key", "otp-1", "--to", "(555) 123-4567", "--region", "US", "--text", "Your code is 1",
			"--channel", "sms", "--identity", "sms-us", "--purpose", "otp", "--tenant", "shop"},
			&sendOptions{spec: queue.Spec{Key: "otp-1", To: "(555) 123-4567", Region: "US", Text: "Your code is 1",
				Channel: "sms", Identity: "sms-us", Purpose: "otp", Tenant: "shop"},
				set: []string{"key", "to", "text"}}},
		{[]string{"send", "--file", "-", "--lane", "bulk"},
			&sendOptions{file: "-", spec: queue.Spec{Lane: "bulk"}}},
		{[]string{"resolve", "01JX", "--as", "failed", "--note", "provider says no", "--by", "ada"},
			&resolveOptions{ref: "01JX", as: "failed", note: "provider says no", by: "ada"}},
		{[]string{"resend", "order-1", "--key", "order-1-r1", "--accept-duplicate-risk", "--tenant", "shop"},
			&resendOptions{ref: "order-1", key: "order-1-r1", acceptRisk: true, tenant: "shop"}},
		{[]string{"resend", "order-1", "--key", "order-1-r2", "--force"},
			&resendOptions{ref: "order-1", key: "order-1-r2", force: true}},
		{[]string{"cancel", "order-1", "--by", "ada", "--note", "customer asked"},
			&cancelOptions{ref: "order-1", by: "ada", note: "customer asked"}},
		{[]string{"cancel", "order-1", "--by", "ada", "--accept-maybe-sent"},
			&cancelOptions{ref: "order-1", by: "ada", acceptMaybeSent: true}},
		{[]string{"stuck", "--older-than", "90s", "--state", "unknown", "--identity", "wa", "--limit", "7", "--fail-if-any"},
			&stuckOptions{olderThan: 90 * time.Second, state: "unknown", identity: "wa", limit: 7, failIfAny: true}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			got, err := parseOnly(t, c.args...)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("options\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// TestFlagsRefusedBeforeAnythingRuns checks that bad flag combinations are
// usage errors (exit 2) raised by parsing and Validate alone.
func TestFlagsRefusedBeforeAnythingRuns(t *testing.T) {
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"send", "--to", "+15551234567", "--text", "hi"}, "--key is required"},
		{[]string{"send", "--key", "k1", "--text", "hi"}, "--to is required"},
		{[]string{"send", "--key", "k1", "--to", "+15551234567"}, "give --template NAME"},
		{[]string{"send", "--key", "k1", "--to", "+15551234567", "--text", "a", "--template", "t"}, "cannot be combined"},
		{[]string{"send", "--file", "-", "--key", "k1"}, "--key is per message"},
		{[]string{"send", "--key", "k1", "--bogus"}, "unknown flag"},
		{[]string{"resolve", "01JX", "--note", "x", "--by", "ada"}, "--as is required"},
		{[]string{"resolve", "01JX", "--as", "maybe", "--note", "x", "--by", "ada"}, "--as must be sent or failed"},
		{[]string{"resolve", "01JX", "--as", "sent", "--by", "ada"}, "--note is required"},
		{[]string{"resolve", "01JX", "--as", "sent", "--note", "x", "--by", " "}, "--by is required"},
		{[]string{"resolve"}, "want"},
		{[]string{"resend", "order-1"}, "--key is required"},
		{[]string{"resend", "order-1", "--key", "bad key"}, "must be 1 to 64 characters"},
		{[]string{"cancel", "order-1", "--by", ""}, "--by is required"},
		{[]string{"stuck", "--state", "queued"}, "--state must be sending or unknown"},
		{[]string{"stuck", "--limit", "0"}, "--limit must be positive"},
		{[]string{"stuck", "--older-than", "-1m"}, "--older-than"},
		{[]string{"serve", "--max-batch-body", "0"}, "--max-body, --max-batch-body and --max-pending must be positive"},
		// The largest body must fit beside the eighth kept for small ones.
		{[]string{"serve", "--max-pending", "4194304"}, "--max-pending (4194304) admits bodies of at most 3670016 bytes"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			got, err := parseOnly(t, c.args...)
			if err == nil {
				t.Fatalf("accepted, options %+v; want an error containing %q", got, c.msg)
			}
			if code := exitCode(wrapUsage(err)); code != ExitUsage {
				t.Fatalf("error %q maps to exit %d, want %d", err, code, ExitUsage)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not contain %q", err, c.msg)
			}
			if got != nil {
				t.Fatalf("options reached the command despite the error: %+v", got)
			}
		})
	}
}
