// Package hotpath is the work a running queue does besides draining, as
// the stores' scale tests run it beside months of finished rows (a store
// filled by internal/store/aged): a webhook status applied to a sent row,
// single sends and msgq serve's group commit, the events dispatcher's
// claims and records, reconcile, and the reads of msgq stuck, stats and
// health. Each must cost in proportion to what it handles, never to the
// finished rows beside it: internal/store/postgres/scale_test.go counts
// PostgreSQL's work at two table sizes, and internal/store/sqlite's
// ops_plan_test.go asks SQLite for the plan of every statement they issue.
//
// Both tests run the same operations, in the same order, from here.
package hotpath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/reconcile"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/aged"
	"github.com/msgq/msgq/internal/webhook"
)

const (
	// Identity sends every aged row and every new one.
	Identity = "sim"
	// Endpoint is the event endpoint the aged rows' events went to; the
	// tests register it (EndpointAdd) before the operations run, so that
	// every status applied writes its event.
	Endpoint = "ep_scale"
	// InFlight is the aged rows left for a person (aged.Shape.InFlight):
	// half unknown, half sending with an expired lease.
	InFlight = 20
	// phoneNumberID names Identity in WhatsApp's webhooks.
	phoneNumberID = "106540352242922"
	// statuses is the webhook statuses applied, one delivery each.
	statuses = 20
)

// Shape is the aged store the operations run beside, at the store's
// clock now. Its rows end a day before now: every window an operation
// reads (stats' hour, the daily recipients' day) then holds the same rows
// at any size. A windowed figure costs what its window holds, which grows
// with the traffic, not with the months kept; what is measured here is
// what lies outside every window.
// The statuses and replies that match nothing were tried at now, as by a
// running webhook serve's last round: a round then reads only what has
// come since.
func Shape(messages int, now time.Time) aged.Shape {
	return aged.Shape{Messages: messages, Now: now.Add(-25 * time.Hour), InFlight: InFlight, Identity: Identity, Endpoint: Endpoint,
		TriedAt: now}
}

// Setup registers the endpoint of the aged rows' events.
func Setup(ctx context.Context, st store.Store) error {
	return st.EndpointAdd(ctx, &store.Endpoint{ID: Endpoint, Tenant: store.DefaultTenant,
		URL: "https://app.example/hooks", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
}

// Op is one operation.
type Op struct {
	Name string
	// N is how many operations Run does: tests compare work per
	// operation.
	N   int
	Run func(ctx context.Context, st store.Store) error
}

// Ops are the operations, in the order they must run (the events
// dispatcher claims the events the webhook statuses wrote), over an aged
// store of messages rows.
func Ops(messages int) []Op {
	stuck := func(p store.StuckParams) func(ctx context.Context, st store.Store) error {
		return func(ctx context.Context, st store.Store) error {
			now, err := st.ClockNow(ctx)
			if err != nil {
				return err
			}
			p.Now = now
			ms, err := st.MessageStuck(ctx, &p)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				return fmt.Errorf("stuck listed nothing: the aged rows in flight are missing")
			}
			return nil
		}
	}
	pids := sentRows(messages, statuses)
	return []Op{
		{Name: "stuck", N: 1, Run: stuck(store.StuckParams{OlderThan: time.Minute})},
		{Name: "stuck --state unknown", N: 1, Run: stuck(store.StuckParams{OlderThan: time.Minute, State: state.Unknown})},
		{Name: "stuck --identity --purpose", N: 1, Run: stuck(store.StuckParams{OlderThan: time.Minute, Identity: Identity,
			Purpose: "order", Tenant: store.DefaultTenant})},
		{Name: "stats", N: 1, Run: func(ctx context.Context, st store.Store) error {
			// What msgq stats reads (internal/cli/cmd_stats.go).
			s, err := st.Stats(ctx, &store.StatsParams{Window: time.Hour, ProgressIdentities: []string{Identity}})
			if err != nil {
				return err
			}
			if n := count(s, state.Delivered); n < messages/2 {
				return fmt.Errorf("stats counted %d delivered rows of %d aged", n, messages)
			}
			_, err = st.EventBacklog(ctx)
			return err
		}},
		{Name: "health", N: 1, Run: func(ctx context.Context, st store.Store) error {
			// What msgq health reads (internal/cli/cmd_health.go), with
			// no vital sign's threshold and with the daily share's.
			if _, err := st.Stats(ctx, &store.StatsParams{Window: store.Resolution}); err != nil {
				return err
			}
			_, err := st.DailyRecipientsUsed(ctx, []string{Identity})
			return err
		}},
		{Name: "enqueue", N: 20, Run: func(ctx context.Context, st store.Store) error {
			for i := range 20 {
				p := params(fmt.Sprintf("hot-one-%03d", i), i)
				if res, err := st.MessageEnqueue(ctx, &p); err != nil {
					return err
				} else if res.Replayed || res.Message.State != state.Queued {
					return fmt.Errorf("enqueue %s: %+v", p.Key, res)
				}
			}
			return nil
		}},
		{Name: "group commit", N: 4 * 32, Run: func(ctx context.Context, st store.Store) error {
			// What msgq serve writes for concurrent single sends
			// (internal/api: groupcommit into MessageEnqueueMany): new
			// keys, and in the last batch two replays of the sends above
			// and two aged keys sent again with another body.
			for b := range 4 {
				ps := make([]store.EnqueueParams, 32)
				for i := range ps {
					ps[i] = params(fmt.Sprintf("hot-many-%d-%03d", b, i), 100+b*32+i)
				}
				if b == 3 {
					ps[0], ps[1] = params("hot-one-000", 0), params("hot-one-001", 1)
					ps[2], ps[3] = params("aged-7", 7), params("aged-8", 8)
				}
				res, err := st.MessageEnqueueMany(ctx, ps)
				if err != nil {
					return err
				}
				if b == 3 && (!res[0].Replayed || !res[1].Replayed || !isConflict(res[2].Err) || !isConflict(res[3].Err)) {
					return fmt.Errorf("group commit: replays and conflicts not found: %+v", res[:4])
				}
			}
			return nil
		}},
		{Name: "webhook status", N: statuses, Run: func(ctx context.Context, st store.Store) error {
			// One delivery at a time, as webhook serve takes them when
			// they come one by one: its store, then the processor's
			// ingest and apply. The statuses name sent rows by provider
			// id (WhatsApp's wamid).
			now, err := st.ClockNow(ctx)
			if err != nil {
				return err
			}
			p := &webhook.Processor{Store: st, PhoneNumberIDs: map[string]string{phoneNumberID: Identity}}
			for _, r := range pids {
				if err := st.WebhookStore(ctx, []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: Identity,
					Body: waStatus(r, "delivered", now)}}); err != nil {
					return err
				}
				sum, err := p.Once(ctx)
				if err != nil {
					return err
				}
				if sum.Applied != 1 {
					return fmt.Errorf("webhook status for %s: %+v", r.providerID, sum)
				}
			}
			return nil
		}},
		{Name: "events dispatcher", N: statuses, Run: func(ctx context.Context, st store.Store) error {
			// The dispatcher's loop (internal/events): claim what is due,
			// record each delivery, and claim again until nothing is.
			n := 0
			for {
				ds, err := st.EventClaim(ctx, &store.EventClaimParams{Owner: "hot-events", LeaseFor: time.Minute, Limit: 8})
				if err != nil {
					return err
				}
				if len(ds) == 0 {
					break
				}
				for _, d := range ds {
					if err := st.EventRecord(ctx, &store.EventOutcome{Seq: d.Seq, EndpointID: d.EndpointID, Owner: "hot-events",
						Delivered: true}); err != nil {
						return err
					}
				}
				n += len(ds)
			}
			if n != statuses {
				return fmt.Errorf("the dispatcher delivered %d events, want the %d statuses' events", n, statuses)
			}
			return nil
		}},
		{Name: "reconcile", N: 1, Run: func(ctx context.Context, st store.Store) error {
			// msgq reconcile with its webhook processor: the expired
			// leases become unknown (sim's rows here are of no configured
			// identity: not requeued, not looked up), and the unknown
			// rows are listed for a person.
			res, err := reconcile.Run(ctx, reconcile.Config{Store: st, Limit: 100, CallTimeout: time.Second,
				Identities: map[string]*reconcile.Identity{},
				Webhooks:   &webhook.Processor{Store: st, PhoneNumberIDs: map[string]string{phoneNumberID: Identity}}})
			if err != nil {
				return err
			}
			if len(res.Changed) != InFlight/2 || len(res.Unresolved) != InFlight {
				return fmt.Errorf("reconcile changed %d rows and left %d, want %d and %d", len(res.Changed), len(res.Unresolved),
					InFlight/2, InFlight)
			}
			return nil
		}},
	}
}

func count(s *store.Stats, st state.State) int {
	n := 0
	for _, c := range s.Counts {
		if c.State == st {
			n += c.N
		}
	}
	return n
}

// params is a new send to a recipient no aged row has.
func params(key string, i int) store.EnqueueParams {
	return store.EnqueueParams{Tenant: store.DefaultTenant, Key: key, To: fmt.Sprintf("+1555%07d", i), Channel: store.ChannelWhatsApp,
		Identity: Identity, Purpose: "order", Payload: store.Payload{Template: "order_update", Lang: "en", Params: []string{"Ada", key}}}
}

// sentRow is an aged row in sent: its provider id and recipient.
type sentRow struct{ providerID, recipient string }

// sentRows are the newest n aged rows in sent, as aged writes them (the
// fate of row g is (g * 7919) % 1000; 50 to 99 is sent).
func sentRows(messages, n int) []sentRow {
	var out []sentRow
	for g := messages; g > InFlight && len(out) < n; g-- {
		if k := (g * 7919) % 1000; k >= 50 && k < 100 {
			out = append(out, sentRow{fmt.Sprintf("aged.%d", g), fmt.Sprintf("1444%07d", g%200000)})
		}
	}
	return out
}

// waStatus is a WhatsApp status webhook for r.
func waStatus(r sentRow, status string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":%q},`+
		`"statuses":[{"id":%q,"status":%q,"timestamp":"%d","recipient_id":%q}]},"field":"messages"}]}]}`,
		phoneNumberID, r.providerID, status, at.Unix(), r.recipient)
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }
