package drain_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/aged"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/postgres/pgwork"
	"github.com/msgq/msgq/internal/store/storetest"
)

// The drain's cost on PostgreSQL must follow its batch, never the table: a
// queue keeps every finished row (keys are kept for ever), so a statement
// that reads messages, history or attempts whole gets slower every day the
// queue runs. These tests count the database's work per drained message
// (rows its scans read and buffers they touched, pgwork) beside a few
// thousand finished rows and beside twenty times as many, and fail when the
// second grows with the table. They count work, not time, so a busy machine
// cannot make them pass or fail.
//
// Before 0023 and the id-array writes (commit 81e4c93) the plain scenario
// read 72 rows a message beside 1,000 finished rows and 463 beside 20,000.

// scaleScenario is one kind of drain to measure.
type scaleScenario struct {
	name string
	// endpoint registers an event endpoint for the rows' tenant (every
	// outcome writes its status event).
	endpoint bool
	// paced gives the identity a rate, a per-recipient interval and a
	// daily recipient limit (the claim locks and writes the slots), and
	// adds challenges whose first step is drained and whose second is
	// then canceled (the challenge decision an outcome triggers).
	paced bool
}

var scaleScenarios = []scaleScenario{
	{name: "no endpoint"},
	{name: "one endpoint", endpoint: true},
	{name: "paced with challenges and an endpoint", endpoint: true, paced: true},
}

const (
	// scaleNew is the rows drained in each measurement.
	scaleNew = 1000
	// scaleChallenges is the challenges of the paced scenario.
	scaleChallenges = 50
)

// scaleSizes are the finished rows beside the drained ones: twenty times
// more in the second measurement. MSGQ_TEST_SCALE_SIZES=10000,1000000
// runs it at other sizes (a one-off measurement; bench/README.md has its
// figures).
func scaleSizes(t *testing.T) (int, int) {
	small, big := 2000, 40000
	if v := os.Getenv("MSGQ_TEST_SCALE_SIZES"); v != "" {
		a, b, ok := strings.Cut(v, ",")
		var err1, err2 error
		small, err1 = strconv.Atoi(a)
		big, err2 = strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || small <= 20 || big < small {
			t.Fatalf("MSGQ_TEST_SCALE_SIZES=%q: want two sizes, the smaller first (10000,1000000)", v)
		}
	}
	return small, big
}

func TestDrainWorkPerMessageDoesNotGrowWithTheTableOnPostgres(t *testing.T) {
	base := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
		}
		t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	scaleSmall, scaleBig := scaleSizes(t)
	for _, sc := range scaleScenarios {
		t.Run(sc.name, func(t *testing.T) {
			small := measureDrain(t, base, sc, scaleSmall)
			big := measureDrain(t, base, sc, scaleBig)
			n := float64(scaleNew)
			if sc.paced {
				n += scaleChallenges
			}
			rowsS, rowsB := float64(small.Rows())/n, float64(big.Rows())/n
			blkS, blkB := float64(small.Blocks())/n, float64(big.Blocks())/n
			t.Logf("per drained message beside %d finished rows: %.1f rows read, %.1f buffers; beside %d: %.1f rows, %.1f buffers",
				scaleSmall, rowsS, blkS, scaleBig, rowsB, blkB)
			if testing.Verbose() {
				t.Logf("beside %d:\n%s\nbeside %d:\n%s", scaleSmall, small, scaleBig, big)
			}
			// Rows read must not grow, table by table (a total would let
			// a cheap scan of a small table at the small size hide a
			// growing one): a full read of any big table adds rows in
			// proportion to it (38,000 / 1,050 = 36 a message, even once
			// a batch of 256). Buffers grow a little with the table, by
			// design: a B-tree of twenty times the rows can be a level
			// deeper, and each message's look-ups and index entries (a
			// dozen) then touch a page more each; the bound catches a
			// plan that walks an index or a table per row, which adds
			// hundreds.
			var grew []string
			for name, b := range big {
				if per(b.SeqRows+b.IndexRows, n) > per(small[name].SeqRows+small[name].IndexRows, n)*1.15+1 {
					grew = append(grew, name)
				}
			}
			if len(grew) > 0 || blkB > blkS*1.5+8 {
				t.Errorf("the drain's work per message grows with the table (rows read of %v; buffers %.1f to %.1f):\nbeside %d finished rows:\n%s\nbeside %d:\n%s",
					grew, blkS, blkB, scaleSmall, small, scaleBig, big)
			}
		})
	}
}

// measureDrain fills a fresh schema with finished finished rows, queues
// scaleNew new rows (and the scenario's challenges), drains them all, and
// returns the work the drain did.
func measureDrain(t *testing.T, base string, sc scaleScenario, finished int) pgwork.Work {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "msgq_scale_" + hex.EncodeToString(b)
	app := schema // each connection's application_name: Idle waits for them to end
	storeURL := withParam(base, "application_name", app)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		admin.Close(context.Background())
	})

	s, err := postgres.Open(ctx, storeURL, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.ClockNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The fill runs on a connection of the counted application, closed
	// (and its backend waited for, below) before the first reading: a
	// backend publishes its counts late, and the fill's must not land in
	// the measurement.
	fill, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	err = aged.Postgres(ctx, fill, schema, aged.Shape{Messages: finished, Now: now, InFlight: 20, Identity: "sim",
		Endpoint: map[bool]string{true: "ep_scale"}[sc.endpoint]})
	if err == nil {
		err = pgwork.NoAutovacuum(ctx, fill, schema)
	}
	fill.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	s, err = postgres.Open(ctx, storeURL, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if sc.endpoint {
		if err := s.EndpointAdd(ctx, &store.Endpoint{ID: "ep_scale", Tenant: store.DefaultTenant,
			URL: "https://app.example/hooks", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
			t.Fatal(err)
		}
	}
	ps := make([]store.EnqueueParams, scaleNew)
	for i := range ps {
		ps[i] = storetest.Params(fmt.Sprintf("scale-%06d", i))
		ps[i].To = fmt.Sprintf("+1555%07d", i)
	}
	if _, err := s.MessageEnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if sc.paced {
		for i := range scaleChallenges {
			first := storetest.Params(fmt.Sprintf("scale-challenge-%03d", i))
			first.To = fmt.Sprintf("+1666%07d", i)
			second := first
			second.Payload = store.Payload{Text: "Your code is 123456"}
			p := store.ChallengeParams{Key: first.Key, ExpiresIn: time.Hour, Steps: []store.ChallengeStepParams{
				{EnqueueParams: first}, {EnqueueParams: second, After: 30 * time.Minute}}}
			if _, err := s.ChallengeEnqueue(ctx, &p); err != nil {
				t.Fatal(err)
			}
		}
	}
	var open int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&open); err != nil || open == 0 {
		t.Fatalf("the store's connections do not carry application_name %s (%d seen, %v): nothing could be counted", app, open, err)
	}
	s.Close()
	if err := pgwork.Idle(ctx, admin, app); err != nil {
		t.Fatal(err)
	}
	before, err := pgwork.Read(ctx, admin, schema)
	if err != nil {
		t.Fatal(err)
	}

	s, err = postgres.Open(ctx, storeURL, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(s, sim.New(sim.DefaultConfig()).Provider())
	cfg.Concurrency = 256
	want := scaleNew
	if sc.paced {
		id := cfg.Identities["sim"]
		id.Pacing = store.Pacing{Spacing: 50 * time.Microsecond, PerRecipient: time.Second}
		id.DailyRecipients = 1_000_000
		want += scaleChallenges
	}
	sum, err := drain.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != want {
		t.Fatalf("the drain sent %d of %d (%+v)", sum.Sent, want, sum)
	}
	if sc.paced {
		// The outcomes end each challenge and cancel its second step.
		if _, err := s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := pgwork.Idle(ctx, admin, app); err != nil {
		t.Fatal(err)
	}
	after, err := pgwork.Read(ctx, admin, schema)
	if err != nil {
		t.Fatal(err)
	}
	w := after.Sub(before)
	if sc.endpoint && w["events"].Inserted < int64(want) {
		t.Fatalf("%d events written for %d sent messages: the endpoint's events are missing", w["events"].Inserted, want)
	}
	return w
}

func per(v int64, n float64) float64 { return float64(v) / n }

// withParam adds a query parameter to a PostgreSQL URL, leaving the rest
// as it was written (re-encoding it would turn spaces into '+', which
// PostgreSQL's options parameter takes literally).
func withParam(base, k, v string) string {
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + url.QueryEscape(k) + "=" + url.QueryEscape(v)
}
