package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// BenchmarkServeSQLite is the load generator of issue 6 point 7: clients
// on loopback post signed WhatsApp status webhooks to the receiver webhook
// serve runs, over a SQLite store (synchronous=FULL: every 200 follows the
// fsync of its delivery), with serve's processing worker running beside
// it. It reports acknowledgements per second and the acknowledgement
// latency's p50 and p99.
//
//	go test -run '^$' -bench ServeSQLite -benchtime 20000x ./internal/webhook
func BenchmarkServeSQLite(b *testing.B) {
	for _, clients := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchServe(b, clients) })
	}
}

func benchServe(b *testing.B, clients int) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	wake := make(chan struct{}, 1)
	rcv := webhook.NewReceiver(webhook.Config{
		Store:  st,
		Routes: []webhook.Route{{Identity: "shop", Kind: &whatsapp.Kind, Verifier: &whatsapp.Verifier{AppSecret: []byte(appSecret)}}},
		Stored: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		},
	})
	srv := httptest.NewServer(rcv.Handler())
	pctx, stop := context.WithCancel(ctx)
	var worker sync.WaitGroup
	p := &webhook.Processor{Store: st, PhoneNumberIDs: map[string]string{phoneID: "shop"}}
	worker.Go(func() { p.Run(pctx, wake, time.Second) })
	defer func() {
		srv.Close()
		rcv.Close()
		stop()
		worker.Wait()
	}()

	// Every status is for a message msgq sent, so the worker applies each
	// one (a conditional update, a history row) while deliveries arrive:
	// the writer is shared as in production, not idle behind parked rows.
	wamids := acceptedRows(b, st, b.N)
	// Bodies are signed before the clock starts: the sender's HMAC is the
	// provider's cost, not msgq's.
	bodies := make([][]byte, b.N)
	sigs := make([]string, b.N)
	for i := range bodies {
		bodies[i] = waStatus(wamids[i], "delivered", 1764410400+int64(i%3600))
		sigs[i] = verify.SignWhatsApp(bodies[i], []byte(appSecret))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+webhook.PathWhatsApp, bytes.NewReader(bodies[i]))
				req.Header.Set("X-Hub-Signature-256", sigs[i])
				t0 := time.Now()
				resp, err := client.Do(req)
				lat[i] = time.Since(t0)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d posts not answered 200", n, b.N)
	}
	slices.Sort(lat)
	// What the worker had applied by the last acknowledgement, and that it
	// catches up: a receiver that outran processing for ever would only
	// be moving the backlog.
	applied := appliedCount(b, st)
	deadline := time.Now().Add(time.Minute)
	for n := applied; n < b.N; n = appliedCount(b, st) {
		if time.Now().After(deadline) {
			b.Fatalf("the worker applied %d of %d statuses a minute after the last acknowledgement", n, b.N)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.ReportMetric(float64(applied)/float64(b.N)*100, "%applied-at-end")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acks/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// acceptedRows makes n rows in sent with wamids, as a drain leaves them.
func acceptedRows(b *testing.B, st store.Store, n int) []string {
	b.Helper()
	ctx := context.Background()
	wamids := make([]string, n)
	for lo := 0; lo < n; lo += 1000 {
		hi := min(n, lo+1000)
		ps := make([]store.EnqueueParams, 0, hi-lo)
		for i := lo; i < hi; i++ {
			// To the recipient the status bodies name (waStatus): a
			// status naming another is set aside as suspect.
			ps = append(ps, store.EnqueueParams{Key: fmt.Sprintf("bench-%07d", i), To: "+15551234567",
				Channel: store.ChannelWhatsApp, Identity: "shop", Payload: store.Payload{Template: "t", Lang: "en"}})
		}
		if _, err := st.MessageEnqueueMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
		cl, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "bench", LeaseFor: time.Hour, Limit: hi - lo})
		if err != nil || len(cl) != hi-lo {
			b.Fatalf("claim: %v (%d)", err, len(cl))
		}
		tps := make([]store.TransitionParams, len(cl))
		for j, c := range cl {
			i := lo + j
			wamids[i] = fmt.Sprintf("wamid.BENCH%09d", i)
			tps[j] = store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "bench", Event: state.Event{Kind: state.Accept},
				Source: store.SourceDrain, ProviderID: wamids[i]}
		}
		// Claims come oldest first, so row i of the batch is key lo+i's.
		if _, err := st.MessageTransitionMany(ctx, tps); err != nil {
			b.Fatal(err)
		}
	}
	return wamids
}

func appliedCount(b *testing.B, st store.Store) int {
	b.Helper()
	s, err := st.Stats(context.Background(), &store.StatsParams{})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, c := range s.Counts {
		if c.State == state.Delivered {
			n += c.N
		}
	}
	return n
}
