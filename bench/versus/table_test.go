package versus

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSummariseTakesTheMedianAndTheRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs   []float64
		want spread
	}{
		{[]float64{5, 1, 3, 2, 4}, spread{3, 1, 5}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
		{[]float64{7}, spread{7, 7, 7}},
	} {
		if got := summarise(tc.xs); got != tc.want {
			t.Errorf("summarise(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
	}
}

func TestThousandsGroupsDigits(t *testing.T) {
	t.Parallel()
	for x, want := range map[float64]string{0: "0", 999.4: "999", 999.5: "1,000", 12345: "12,345", 1234567: "1,234,567"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestTableHasOneRowPerMeasuredWorkload(t *testing.T) {
	t.Parallel()
	o := &Options{N: 20000, One: 1000, Batch: 4096, Runs: 3, Stores: []string{storePostgres, storeSQLite}}
	res := newResults()
	for _, x := range []float64{100, 200, 300} {
		res.add(workload{storePostgres, "work"}, "River", x*10)
		res.add(workload{storePostgres, "work"}, "msgq", x)
	}
	var b bytes.Buffer
	writeTable(&b, o, res)
	out := b.String()
	if !strings.Contains(out, "| PostgreSQL: work 20,000 (River, no-op worker) / drain (msgq, zero-latency sim), msgs/s | 2,000 (1,000–3,000) | 200 (100–300) | 0.10 |") {
		t.Errorf("table lacks the work row:\n%s", out)
	}
	if strings.Contains(out, "SQLite") {
		t.Errorf("table has a row for a workload not measured:\n%s", out)
	}
}

// TestTableShowsTheAgedAndEndpointRows: the aged row compares the two
// sides as the others do; the endpoint row is msgq against itself, with
// and without, and says so.
func TestTableShowsTheAgedAndEndpointRows(t *testing.T) {
	t.Parallel()
	o := &Options{N: 20000, Aged: 1_000_000, Batch: 4096, Runs: 3, Stores: []string{storePostgres, storeSQLite}}
	res := newResults()
	for _, x := range []float64{100, 200, 300} {
		res.add(workload{storePostgres, "aged"}, "River", x*2)
		res.add(workload{storePostgres, "aged"}, "msgq", x)
		res.add(workload{storeSQLite, "endpoint"}, withEndpoint, x*4)
		res.add(workload{storeSQLite, "endpoint"}, withoutEndpoint, x*5)
		res.addCPU(workload{storeSQLite, "endpoint"}, withEndpoint, 1000, time.Duration(x)*time.Millisecond, 0)
		res.addCPU(workload{storeSQLite, "endpoint"}, withoutEndpoint, 1000, time.Duration(x)*time.Millisecond/2, 0)
	}
	var b bytes.Buffer
	writeTable(&b, o, res)
	writeCPU(&b, o, res)
	out := b.String()
	for _, want := range []string{
		"| PostgreSQL: work / drain 20,000 beside 1,000,000 finished rows (River: completed jobs; msgq: messages with history and attempts), msgs/s | 400 (200–600) | 200 (100–300) | 0.50 |",
		"| SQLite: msgq drain 20,000 with one event endpoint (outbox written, no dispatcher) / without, msgs/s | n/a | with 800 (400–1,200); without 1,000 (500–1,500) | 0.80 with/without (target ≥ 0.75) |",
		"the outbox may cost at most 25%",
		"CPU per message of msgq's drain with one event endpoint and without",
		"SQLite:    with 200 µs; without 100 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"| PostgreSQL: msgq drain", "| SQLite: work / drain"} {
		if strings.Contains(out, not) {
			t.Errorf("output has %q, a row not measured:\n%s", not, out)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	o := &Options{N: 0, Batch: 0, Runs: 0, Concurrency: 0, Stores: []string{"postgres", "mysql"}}
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"-n", "-batch", "-runs", "-concurrency", "no -postgres URL", `unknown store "mysql"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestWithDBNamesAnotherDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h:5432/test?sslmode=disable": "postgres://u@h:5432/versus_aged_1?sslmode=disable",
		"postgresql://u@h":                         "postgresql://u@h/versus_aged_1",
		"host=h dbname=test":                       "host=h dbname=test dbname=versus_aged_1",
	} {
		if got := withDB(in, "versus_aged_1"); got != want {
			t.Errorf("withDB(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWithAppLeavesTheOtherParametersAlone(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h/db": "postgres://u@h/db?application_name=versus_msgq_1",
		"postgres://u@h/db?options=-c%20a%3Db&sslmode=x": "postgres://u@h/db?options=-c%20a%3Db&sslmode=x&application_name=versus_msgq_1",
		"host=h dbname=db": "host=h dbname=db",
	} {
		if got := withApp(in, "versus_msgq_1"); got != want {
			t.Errorf("withApp(%q) = %q, want %q", in, got, want)
		}
	}
}
