package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The progress bar is for people: it is drawn on stderr only when stderr
// is a terminal, and never on stdout, where the results go.
func TestSendFileProgressBarOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	in := writeLines(t,
		`{"key":"p-1","to":"+15551234567","text":"one"}`,
		`{"key":"p-2","to":"+15551234567","text":"two"}`)
	for _, tty := range []bool{true, false} {
		var out, errb bytes.Buffer
		storeURL := "sqlite:" + filepath.Join(t.TempDir(), "q.db")
		code := Run(context.Background(), []string{"send", "--file", in, "--store", storeURL},
			&IOStreams{Out: &out, Err: &errb, ErrTTY: tty})
		if code != 0 {
			t.Fatalf("tty=%v: exit %d: %s", tty, code, errb.String())
		}
		hasBar := strings.Contains(errb.String(), "100%")
		if hasBar != tty {
			t.Errorf("tty=%v: progress bar drawn = %v; stderr %q", tty, hasBar, errb.String())
		}
		if !tty && strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("without a terminal stderr should be the summary line alone, got %q", errb.String())
		}
		if strings.Contains(out.String(), "enqueue ") || strings.Count(out.String(), "\n") != 2 {
			t.Errorf("tty=%v: stdout should hold the two results alone, got %q", tty, out.String())
		}
	}
}

// A batch boundary must not reorder or drop results: more lines than one
// transaction holds, with bad lines scattered through them.
func TestSendFileResultsStayInInputOrderAcrossBatches(t *testing.T) {
	t.Parallel()
	var lines []string
	const n = bulkBatch*2 + 10
	for i := range n {
		if i%1000 == 7 {
			lines = append(lines, `{"key":"bad key","to":"+15551234567","text":"x"}`)
			continue
		}
		lines = append(lines, `{"key":"o-`+itoa(i)+`","to":"+15551234567","text":"x"}`)
	}
	in := writeLines(t, lines...)
	var out, errb bytes.Buffer
	storeURL := "sqlite:" + filepath.Join(t.TempDir(), "q.db")
	code := Run(context.Background(), []string{"send", "--file", in, "--store", storeURL},
		&IOStreams{Out: &out, Err: &errb})
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d (some lines were bad): %s", code, ExitUsage, errb.String())
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != n {
		t.Fatalf("%d result lines for %d input lines", len(got), n)
	}
	for i, line := range got {
		prefix := "line " + itoa(i+1) + ": "
		want := prefix + "enqueued o-" + itoa(i) + " "
		if i%1000 == 7 {
			want = prefix + "invalid: "
		}
		if !strings.HasPrefix(line, want) {
			t.Fatalf("result %d = %q, want prefix %q", i, line, want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
