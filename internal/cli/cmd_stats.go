package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// outPrometheus is the Prometheus text exposition format, which only stats
// writes (a node_exporter textfile collector reads it).
const outPrometheus = "prometheus"

// outputsAnnotation names, on a command, the -o formats it accepts beyond
// table and json (space-separated); config.go checks -o against it.
const outputsAnnotation = "msgq/outputs"

// retryClasses are the outcome classes, each shown even at zero so that a
// script or a dashboard finds every one.
var retryClasses = []string{string(retry.Accepted), string(retry.RateLimited), string(retry.Transient),
	string(retry.Ambiguous), string(retry.Permanent), string(retry.Identity)}

type statsOptions struct {
	window time.Duration
}

func (o *statsOptions) validate() error {
	if o.window <= 0 {
		return usagef("--window must be positive (got %v)", o.window)
	}
	return nil
}

func newStatsCmd(a *app) *cobra.Command {
	o := &statsOptions{}
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "The queue's vital signs: counts, oldest eligible queued row, stuck rows, replays, latency",
		Long: `Print the queue's vital signs (the whole store, every tenant):

  - rows by identity and state;
  - the age of the oldest eligible queued row: due, within its deadline, its
    identity not paused. It grows whenever drains stop keeping up, whatever the
    cause: the one alert that fires for every kind of stuck drain;
  - rows in sending whose lease has expired (a drain died mid-call);
  - rows in unknown (a call whose answer was lost: someone must decide);
  - key replays: sends that found their key with the same body (something ran
    twice), since the store was created;
  - provider calls finished within --window, by outcome class;
  - deliveries within --window, and the sent-to-delivered latency (p50, p95)
    of the latest 10,000 of them;
  - webhooks: statuses and inbound messages that arrived again (since the
    store was created), inbound messages linked to no sent message, statuses
    waiting for their message, deliveries not processed yet, and unreadable
    deliveries (processing could not read them, in whole or in part; their
    bodies wait for a person: msgq webhook unreadable; purge keeps them);
  - key conflicts: sends refused because their key holds another body (since
    the store was created, and within --window), and key replays within it;
  - rows in sending claimed over a minute ago, lease expired or not: each may
    become a duplicate;
  - rows failed within --window, by reason (permanent, expired, exhausted,
    canceled, resolved);
  - resends made by operators (since the store was created, and within
    --window), and rows flagged maybe_sent, by state;
  - for each identity whose webhooks msgq receives: the rows that became sent
    within --window and at least --no-progress-after ago, and how many of them
    got no delivered, read or failed status since (the provider accepts but
    nothing arrives);
  - queued rows of identities that cannot send from here (not configured, or
    their token is not set in this environment);
  - verification challenges (docs/challenges.md): open and blocked by an
    uncertain step, completed by step, expired, failed, superseded, fallbacks
    fired, superseding sends and unknown steps past their deadline (since the
    store was created); within --window, the challenges expired and the time
    from a challenge's creation to its first delivered evidence (p50, p95).
  - status events to the applications' endpoints (docs/events.md): pending,
    dead (attempts ran out), and the age of the oldest pending one.

-o json prints one object (durations in nanoseconds, times in RFC 3339).
-o prometheus prints the Prometheus text exposition format, for
node_exporter's textfile collector: write it to a temporary file and rename it
into the collector's directory, so that node_exporter never reads half a file.

` + exitStatusHelp,
		Example: `  msgq stats
  msgq stats --window 24h -o json
  msgq stats -o prometheus > /var/lib/node_exporter/msgq.prom.tmp &&
    mv /var/lib/node_exporter/msgq.prom.tmp /var/lib/node_exporter/msgq.prom`,
		Annotations: map[string]string{outputsAnnotation: outPrometheus},
		Args:        exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runStats(cmd.Context(), a, o)
		},
	}
	cmd.Flags().DurationVar(&o.window, "window", store.DefaultStatsWindow, "the span of the recent figures (attempts by class, deliveries)")
	// A string, resolved with health's setting of the same name in
	// config.go (health.no_progress_after) and parsed by health.Windows.
	cmd.Flags().String("no-progress-after", "", "how long `D` a sent row may wait for a delivered or read status (default 15m) [MSGQ_HEALTH_NO_PROGRESS_AFTER]")
	return cmd
}

// statsResult is what `stats -o json` prints: the store's figures (their
// field names are the contract) and the age of the oldest eligible row.
type statsResult struct {
	*store.Stats
	// OldestEligibleAge is At minus OldestEligible (null when no row is
	// eligible).
	OldestEligibleAge *time.Duration `json:"oldest_eligible_age_ns"`
	// QueuedUnsendable are the identities with queued rows that cannot
	// be sent from this environment (stats_vitals.go).
	QueuedUnsendable []health.Unsendable `json:"queued_unsendable"`
	// Events is the outbox of status events to the applications'
	// endpoints (docs/events.md).
	Events eventStats `json:"events"`
}

// eventStats is the events outbox's backlog.
type eventStats struct {
	store.EventBacklog
	// OldestPendingAge is At minus OldestPendingAt (null when nothing is
	// pending): it grows while an endpoint fails or no msgq endpoints
	// deliver runs.
	OldestPendingAge *time.Duration `json:"oldest_pending_age_ns"`
}

func (e *eventStats) age() time.Duration {
	if e.OldestPendingAge == nil {
		return 0
	}
	return *e.OldestPendingAge
}

func runStats(ctx context.Context, a *app, o *statsOptions) error {
	_, noProgress, err := health.Windows(health.Settings{NoProgressAfter: a.cfg.Health.NoProgressAfter})
	if err != nil {
		return err
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	s, err := st.Stats(ctx, &store.StatsParams{Window: o.window, NoProgressAfter: noProgress,
		ProgressIdentities: progressIdentities(a.cfg.Identities)})
	if err != nil {
		return err
	}
	for _, c := range retryClasses {
		if _, ok := s.AttemptsByClass[c]; !ok {
			s.AttemptsByClass[c] = 0
		}
	}
	res := statsResult{Stats: s, QueuedUnsendable: unsendable(a.cfg.Identities, s.Counts)}
	eb, err := st.EventBacklog(ctx)
	if err != nil {
		return err
	}
	res.Events.EventBacklog = *eb
	if eb.OldestPendingAt != nil {
		age := max(0, s.At.Sub(*eb.OldestPendingAt))
		res.Events.OldestPendingAge = &age
	}
	if s.OldestEligible != nil {
		age := health.OldestAge(s)
		res.OldestEligibleAge = &age
	}
	switch a.cfg.Output {
	case outJSON:
		return printJSON(a.ios.Out, res)
	case outPrometheus:
		return printPrometheus(a.ios.Out, s, res.QueuedUnsendable, &res.Events)
	}
	return printStats(a.ios.Out, &res)
}

func printStats(w io.Writer, r *statsResult) error {
	// Counts: one line per identity, one column per state, and a total.
	byID := map[string]map[state.State]int{}
	total := map[state.State]int{}
	for _, c := range r.Counts {
		if byID[c.Identity] == nil {
			byID[c.Identity] = map[state.State]int{}
		}
		byID[c.Identity][c.State] += c.N
		total[c.State] += c.N
	}
	// intake rows exist only where PostgreSQL's enqueue() takes sends in
	// (docs/sql-enqueue.md): their column is shown while there are some.
	states := slices.DeleteFunc(slices.Clone(state.All), func(s state.State) bool { return s == state.Intake && total[s] == 0 })
	header := []string{"IDENTITY"}
	for _, s := range states {
		header = append(header, strings.ToUpper(string(s)))
	}
	line := func(name string, n map[state.State]int) []string {
		row := []string{name}
		for _, s := range states {
			row = append(row, strconv.Itoa(n[s]))
		}
		return row
	}
	var rows [][]string
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		rows = append(rows, line(id, byID[id]))
	}
	if len(byID) != 1 {
		rows = append(rows, line("(all)", total))
	}
	if err := printTable(w, header, rows); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}

	s := r.Stats
	oldest := "none"
	if s.OldestEligible != nil {
		oldest = fmt.Sprintf("%s (due since %s)", duration.Human(health.OldestAge(s)), stamp(*s.OldestEligible))
	}
	var classes []string
	for _, c := range slices.Sorted(maps.Keys(s.AttemptsByClass)) {
		classes = append(classes, fmt.Sprintf("%s %d", c, s.AttemptsByClass[c]))
	}
	win := duration.Human(s.Window)
	delivered := strconv.Itoa(s.Delivered)
	if s.Delivered > 0 {
		delivered += fmt.Sprintf(" (sent to delivered: p50 %s, p95 %s)", duration.Human(s.DeliveryP50), duration.Human(s.DeliveryP95))
	}
	lines := [][]string{{"oldest eligible queued", oldest}}
	// Only where PostgreSQL's enqueue() takes sends in, and while one
	// waits for its admission (docs/sql-enqueue.md).
	if s.OldestIntake != nil {
		lines = append(lines, []string{"oldest intake", fmt.Sprintf("%s (taken in at %s)", duration.Human(health.IntakeAge(s)), stamp(*s.OldestIntake))})
	}
	return printTable(w, nil, append(append(lines, [][]string{
		{"sending past lease", strconv.Itoa(s.SendingPastLease)},
		{"unknown", strconv.Itoa(s.Unknown)},
		{"key replays", strconv.FormatInt(s.KeyReplays, 10)},
		{"attempts (last " + win + ")", strings.Join(classes, ", ")},
		{"delivered (last " + win + ")", delivered},
		{"duplicate webhooks", strconv.FormatInt(s.DuplicateWebhooks, 10)},
		{"replayed webhooks", strconv.FormatInt(s.ReplayedWebhooks, 10)},
		{"unattributed inbound", strconv.Itoa(s.UnattributedInbound)},
		{"parked webhook statuses", strconv.Itoa(s.ParkedEvidence)},
		{"unprocessed webhooks", strconv.Itoa(s.UnprocessedWebhooks)},
		{"unreadable webhooks", strconv.Itoa(s.UnreadableWebhooks)},
		{"largest clock offset", clockOffsetText(s)},
		{"suspect webhook statuses", strconv.Itoa(s.SuspectEvidence)},
		{"provider id collisions", strconv.Itoa(s.ProviderIDCollisions)},
		{"provider notices", fmt.Sprintf("%d (%d not understood)", s.Notices, s.UnknownNotices)},
		{"templates held", fmt.Sprintf("%d (%d queued rows waiting)", s.TemplateHolds, s.TemplateHeldRows)},
	}...), append(vitalRows(s, r.QueuedUnsendable), []string{"status events", eventsLine(&r.Events)})...))
}

// eventsLine sums up the events outbox for people.
func eventsLine(e *eventStats) string {
	line := fmt.Sprintf("%d pending, %d dead", e.Pending, e.Dead)
	if e.OldestPendingAt != nil {
		line += fmt.Sprintf(" (oldest pending %s old)", duration.Human(e.age()))
	}
	return line
}

// clockOffsetText is the largest recent clock offset for people, with the
// process that measured it.
func clockOffsetText(s *store.Stats) string {
	if s.ClockOffsetProcess == "" {
		return "0s (none measured in the last " + duration.Human(store.ClockOffsetRecent) + ")"
	}
	return fmt.Sprintf("%+.3fs (%s)", s.ClockOffset.Seconds(), s.ClockOffsetProcess)
}

// printPrometheus writes the figures in the Prometheus text exposition
// format: a registry of gauges (and the replay counter), gathered and
// encoded by the Prometheus libraries.
func printPrometheus(w io.Writer, s *store.Stats, un []health.Unsendable, ev *eventStats) error {
	reg := prometheus.NewPedanticRegistry()
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	messages := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_messages",
		Help: "Messages by sending identity and state."}, []string{"identity", "state"})
	attempts := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_recent_attempts",
		Help: "Provider calls finished within the window (msgq_stats_window_seconds), by outcome class."}, []string{"class"})
	replays := prometheus.NewCounter(prometheus.CounterOpts{Name: "msgq_key_replays_total",
		Help: "Sends that found their key with the same body (something ran twice), since the store was created."})
	dups := prometheus.NewCounter(prometheus.CounterOpts{Name: "msgq_duplicate_webhooks_total",
		Help: "Webhook statuses and inbound messages that arrived again (provider retries, replays), since the store was created."})
	replayed := prometheus.NewCounter(prometheus.CounterOpts{Name: "msgq_replayed_webhooks_total",
		Help: "Webhook deliveries answered 200 but not stored again, their dedupe key being stored already (provider retries, replays), since the store was created."})
	reg.MustRegister(messages, attempts, replays, dups, replayed)

	// Every state of every identity with rows, zeros included, so that a
	// series does not vanish when its count drops to zero.
	for _, c := range s.Counts {
		for _, st := range state.All {
			messages.WithLabelValues(c.Identity, string(st))
		}
	}
	for _, c := range s.Counts {
		messages.WithLabelValues(c.Identity, string(c.State)).Add(float64(c.N))
	}
	for c, n := range s.AttemptsByClass {
		attempts.WithLabelValues(c).Set(float64(n))
	}
	replays.Add(float64(s.KeyReplays))
	dups.Add(float64(s.DuplicateWebhooks))
	replayed.Add(float64(s.ReplayedWebhooks))
	gauge("msgq_unattributed_inbound", "Inbound messages no sent message could be linked to (msgq inbox --unattributed).").
		Set(float64(s.UnattributedInbound))
	gauge("msgq_parked_webhook_statuses", "Webhook statuses waiting for a message with their provider id.").
		Set(float64(s.ParkedEvidence))
	gauge("msgq_unprocessed_webhooks", "Stored webhook deliveries not processed yet (is webhook serve's worker or webhook process running?).").
		Set(float64(s.UnprocessedWebhooks))
	gauge("msgq_unreadable_webhooks", "Stored webhook deliveries processing could not read, in whole or in part (msgq webhook unreadable; msgq webhook retry once fixed); purge keeps them.").
		Set(float64(s.UnreadableWebhooks))
	gauge("msgq_suspect_webhook_statuses", "Webhook statuses set aside because they disagree with the message they name (msgq webhook suspect); never applied.").
		Set(float64(s.SuspectEvidence))
	gauge("msgq_notices", "What webhooks said about identities rather than messages (msgq webhook notices).").
		Set(float64(s.Notices))
	gauge("msgq_unknown_notices", "Webhook items msgq does not understand, kept and listed (msgq webhook notices --kind unknown).").
		Set(float64(s.UnknownNotices))
	gauge("msgq_template_holds", "Templates a provider reported paused, disabled or rejected, per identity.").
		Set(float64(s.TemplateHolds))
	gauge("msgq_template_held_rows", "Queued messages waiting because their template is held.").
		Set(float64(s.TemplateHeldRows))
	gauge("msgq_provider_id_collisions", "Messages sharing a provider id with another message of their identity (msgq webhook suspect); their statuses are set aside.").
		Set(float64(s.ProviderIDCollisions))
	gauge("msgq_oldest_eligible_queued_age_seconds",
		"How long the oldest eligible queued message (due, within its deadline, identity not paused) has been due; 0 when none is.").
		Set(health.OldestAge(s).Seconds())
	gauge("msgq_oldest_intake_age_seconds",
		"How long the oldest message PostgreSQL's enqueue() took in has waited for its admission; 0 when none waits (always on SQLite).").
		Set(health.IntakeAge(s).Seconds())
	gauge("msgq_sending_past_lease", "Messages in sending whose lease has expired (a drain died mid-call).").
		Set(float64(s.SendingPastLease))
	gauge("msgq_recent_deliveries", "Messages delivered within the window.").Set(float64(s.Delivered))
	gauge("msgq_delivery_latency_p50_seconds", "Sent-to-delivered latency, median, of the deliveries within the window.").
		Set(s.DeliveryP50.Seconds())
	gauge("msgq_delivery_latency_p95_seconds", "Sent-to-delivered latency, 95th percentile, of the deliveries within the window.").
		Set(s.DeliveryP95.Seconds())
	gauge("msgq_clock_offset_seconds", "The largest offset (host minus store clock; positive is ahead) a drain, reconcile or webhook serve "+
		"measured in the last 10 minutes; PostgreSQL decides on the server's clock, so a large one means a host's time sync is broken. Always 0 on SQLite.").
		Set(s.ClockOffset.Seconds())
	gauge("msgq_stats_window_seconds", "The span of the msgq_recent_* figures.").Set(s.Window.Seconds())
	gauge("msgq_stats_timestamp_seconds", "When these figures were taken (Unix time): alert when it stops moving.").
		Set(float64(s.At.UnixMicro()) / 1e6)

	registerVitals(reg, s, un)
	gauge("msgq_events_pending", "Status events not yet delivered to their application endpoint (msgq endpoints list).").Set(float64(ev.Pending))
	gauge("msgq_events_dead", "Status events given up on after their attempts ran out (msgq endpoints retry sends them again).").Set(float64(ev.Dead))
	gauge("msgq_events_oldest_pending_age_seconds", "How long ago the oldest pending status event was written; 0 when none is pending.").
		Set(ev.age().Seconds())

	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}
