package versus

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMainRunsEveryWorkloadOnce runs the whole comparison with tiny
// counts: SQLite always, PostgreSQL when MSGQ_TEST_POSTGRES_URL is set.
// The aged workload's fill is checked as it runs (both sides' counts, and
// River taking the filled args for duplicates), and so is the endpoint
// workload's outbox (an event pending for every message sent).
func TestMainRunsEveryWorkloadOnce(t *testing.T) {
	args := []string{"-n", "300", "-one", "20", "-aged", "500", "-runs", "1", "-dir", t.TempDir(), "-stores", "sqlite"}
	if url := os.Getenv("MSGQ_TEST_POSTGRES_URL"); url != "" {
		args = append(args, "-stores", "postgres,sqlite", "-postgres", url)
	} else {
		t.Log("MSGQ_TEST_POSTGRES_URL is not set: SQLite only")
	}
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"| SQLite: insert 300 unique rows in batches", "| SQLite: insert 20 unique rows one at a time", "| SQLite: work 300",
		"| SQLite: work / drain 300 beside 500 finished rows", "| SQLite: msgq drain 300 with one event endpoint"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if os.Getenv("MSGQ_TEST_POSTGRES_URL") != "" && !strings.Contains(out, "attempts 1.00/0.00/0.00, history 3.00/0.00/0.00, messages 1.00/2.00/0.00") {
		t.Errorf("msgq's writes per message are not one attempt, three history rows and a message updated twice:\n%s", out)
	}
	if url := os.Getenv("MSGQ_TEST_POSTGRES_URL"); url != "" {
		for _, want := range []string{"| PostgreSQL: work / drain 300 beside 500 finished rows", "| PostgreSQL: msgq drain 300 with one event endpoint"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// The aged templates and their copies are databases of their own:
		// none is left behind.
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		var left int
		if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname LIKE 'versus\\_aged\\_%'").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("%d aged databases left behind", left)
		}
	}
}

func TestMainRefusesBadFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-runs", "0", "-stores", "sqlite"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "Try: versus -h") {
		t.Errorf("no hint: %s", stderr.String())
	}
}

// TestMainRunsOnlyTheWorkloadsAsked runs the one-at-a-time insert alone:
// the table has its row and no other.
func TestMainRunsOnlyTheWorkloadsAsked(t *testing.T) {
	args := []string{"-workloads", "one", "-one", "20", "-runs", "2", "-dir", t.TempDir(), "-stores", "sqlite"}
	if url := os.Getenv("MSGQ_TEST_POSTGRES_URL"); url != "" {
		args = append(args, "-stores", "postgres,sqlite", "-postgres", url)
	}
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "| SQLite: insert 20 unique rows one at a time") {
		t.Errorf("output lacks the one-at-a-time row:\n%s", out)
	}
	for _, not := range []string{"in batches of", "| SQLite: work", "| PostgreSQL: work", "rows written per message", "finished rows", "event endpoint"} {
		if strings.Contains(out, not) {
			t.Errorf("output has %q, a workload not asked for:\n%s", not, out)
		}
	}
}

func TestMainRefusesWorkWithoutBulk(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-workloads", "work,one", "-stores", "sqlite"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "work needs bulk") {
		t.Errorf("stderr does not say why: %s", stderr.String())
	}
}

func TestMainRefusesNoAgedRowsForTheAgedWorkload(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-workloads", "aged", "-aged", "0", "-stores", "sqlite"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "-aged must be at least 1") {
		t.Errorf("stderr does not say why: %s", stderr.String())
	}
	// Without the aged workload, -aged is not looked at.
	o := &Options{N: 1, Batch: 1, Runs: 1, Concurrency: 1, Stores: []string{storeSQLite}, Workloads: []string{"endpoint"}}
	if err := o.Validate(); err != nil {
		t.Errorf("endpoint alone with -aged 0: %v", err)
	}
}
