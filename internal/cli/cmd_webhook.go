package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

func newWebhookCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Receive, process and replay provider webhooks (statuses and inbound messages)",
		Long: `Providers report what happened to a message (sent, delivered, read, failed) and
pass on customers' replies through webhooks. msgq keeps every delivery raw and
durably before it answers 200, then processes the stored deliveries: statuses are
deduplicated and applied forward only (a late "sent" never undoes "delivered"),
statuses for messages whose provider id is not known yet are parked until it is,
and inbound messages are linked to the message they answer and open the
customer-service window.

` + exitStatusHelp,
		Args: exactArgs(0, "a subcommand (serve, process, replay, parked, suspect, notices, unreadable, show or retry)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWebhookServeCmd(a), newWebhookProcessCmd(a), newWebhookReplayCmd(a), newWebhookParkedCmd(a),
		newWebhookSuspectCmd(a), newWebhookNoticesCmd(a), newWebhookUnreadableCmd(a), newWebhookShowCmd(a), newWebhookRetryCmd(a))
	return cmd
}

// webhookSecrets reads the configured identities' webhook secrets from the
// environment. An identity whose variables are named but unset here is
// skipped (returned, for one warning each): its deliveries get 401 from
// this process, so its provider retries them, and the other identities'
// webhooks are not held hostage to it. A malformed whsec_ secret is a
// usage error at start-up, not a stream of 401s later.
func webhookSecrets(ids map[string]*identity) (webhook.Config, []skippedIdentity, error) {
	var cfg webhook.Config
	var skipped []skippedIdentity
	names := make([]string, 0, len(ids))
	for n := range ids {
		if miss := ids[n].missingWebhookEnv(); len(miss) > 0 {
			skipped = append(skipped, skippedIdentity{Name: n, Missing: miss})
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Name < skipped[j].Name })
	env := func(id, key, name string) (string, error) {
		v := os.Getenv(name)
		if v == "" {
			return "", usagef("identity %s: environment variable %s (%s) is not set", id, name, key)
		}
		return v, nil
	}
	for _, n := range names {
		ic := ids[n].Config
		if ic.AppSecretEnv != "" {
			v, err := env(n, "app_secret_env", ic.AppSecretEnv)
			if err != nil {
				return cfg, nil, err
			}
			cfg.WhatsApp = append(cfg.WhatsApp, webhook.AppSecret{Identity: n, Secret: []byte(v)})
		}
		if ic.VerifyTokenEnv != "" {
			v, err := env(n, "verify_token_env", ic.VerifyTokenEnv)
			if err != nil {
				return cfg, nil, err
			}
			cfg.VerifyTokens = append(cfg.VerifyTokens, v)
		}
		if ic.WebhookSecretEnv != "" {
			v, err := env(n, "webhook_secret_env", ic.WebhookSecretEnv)
			if err != nil {
				return cfg, nil, err
			}
			hs := webhook.HTTPSecrets{Identity: n}
			for _, f := range strings.Fields(v) {
				s, err := verify.ParseSecret(f)
				if err != nil {
					return cfg, nil, usagef("identity %s: %s (webhook_secret_env) does not hold whsec_ secrets", n, ic.WebhookSecretEnv)
				}
				hs.Secrets = append(hs.Secrets, s)
			}
			if len(hs.Secrets) == 0 {
				return cfg, nil, usagef("identity %s: %s (webhook_secret_env) holds no whsec_ secret", n, ic.WebhookSecretEnv)
			}
			cfg.HTTP = append(cfg.HTTP, hs)
		}
	}
	return cfg, skipped, nil
}

// phoneNumberIDs maps the WhatsApp identities' phone_number_ids to their
// names.
func phoneNumberIDs(ids map[string]*identity) map[string]string {
	out := map[string]string{}
	for n, id := range ids {
		if id.Config.PhoneNumberID != "" {
			out[id.Config.PhoneNumberID] = n
		}
	}
	return out
}

// templateIdentities maps each WhatsApp identity to the identities that
// share its app secret (the same Meta app, so the same business account's
// templates), itself included.
func templateIdentities(ids map[string]*identity) map[string][]string {
	bySecret := map[string][]string{}
	for n, id := range ids {
		if id.Config.AppSecretEnv != "" {
			bySecret[id.Config.AppSecretEnv] = append(bySecret[id.Config.AppSecretEnv], n)
		}
	}
	out := map[string][]string{}
	for _, group := range bySecret {
		sort.Strings(group)
		for _, n := range group {
			out[n] = group
		}
	}
	return out
}

type webhookServeOptions struct {
	addr       string
	maxBody    int64
	maxPending int64
	maxConns   int
	tolerance  time.Duration
	process    bool
	poll       time.Duration
	grace      time.Duration
	clockWarn  time.Duration
}

func (o *webhookServeOptions) Validate() error {
	switch {
	case o.addr == "":
		return usagef("--addr is required, e.g. :8080")
	case o.maxBody <= 0:
		return usagef("--max-body must be positive")
	case o.maxPending < o.maxBody:
		return usagef("--max-pending (%d) must be at least --max-body (%d), or no body of the largest size could ever be read", o.maxPending, o.maxBody)
	case o.maxConns <= 0:
		return usagef("--max-conns must be positive")
	case o.tolerance <= 0 || o.poll <= 0 || o.grace <= 0:
		return usagef("--tolerance, --poll and --grace must be positive")
	}
	return nil
}

func newWebhookServeCmd(a *app) *cobra.Command {
	o := &webhookServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Receive webhooks: verify, store raw, answer 200, then process",
		Long: `Serve the webhook endpoints:

  GET  /webhooks/whatsapp   Meta's verification handshake (verify_token_env)
  POST /webhooks/whatsapp   WhatsApp Cloud API, signed with X-Hub-Signature-256 (app_secret_env)
  POST /webhooks/http       the http provider, signed with Standard Webhooks (webhook_secret_env)
  GET  /healthz             200 while the store is reachable

A delivery with a missing or wrong signature (or a Standard Webhooks timestamp
further than --tolerance from now) gets 401, a body over --max-body 413, a body
that is not the provider's webhook 400; none of them is stored. A valid delivery
is stored raw and durably and only then answered 200; if it cannot be stored the
answer is 500, so the provider retries. Unless --process=false, a worker then
processes stored deliveries (run msgq webhook process from cron otherwise).
SIGINT/SIGTERM stop accepting, let requests in progress finish, and exit 0.

Memory is bounded before any signature is checked. A request without a
well-formed signature header (or with a stale timestamp) is refused before its
body is read. Bodies held in memory at once (read, being verified, or waiting
for their write) are capped at --max-pending bytes: a body that does not fit is
answered 503 with Retry-After, unread, and its provider retries later. An eighth
of --max-pending is kept for bodies of 64 KiB or less, the size real deliveries
have, so a flood of large bodies does not crowd them out. At most --max-conns
connections are open at once (more wait to be accepted); near the cap, idle
keep-alive connections are closed. Memory taken by a burst is handed back to
the operating system once it is over. The process's Go memory limit is set to
twice --max-pending plus 64 MiB unless GOMEMLIMIT is set.

` + exitStatusHelp,
		Example: `  msgq webhook serve --addr :8080
  msgq webhook serve --addr 127.0.0.1:8080 --process=false   # receive only; process from cron`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			wc, skipped, err := webhookSecrets(a.cfg.Identities)
			if err != nil {
				return err
			}
			if len(wc.WhatsApp) == 0 && len(wc.HTTP) == 0 {
				if len(skipped) > 0 {
					return usagef("no identity's webhook secrets are set here, nothing could be verified: %s", skippedList(skipped))
				}
				return usagef("no identity has app_secret_env (whatsapp) or webhook_secret_env (http): nothing could be verified")
			}
			warnSkipped(a, "webhook", skipped, func(skippedIdentity) string {
				return "its deliveries get 401 here, so its provider retries them"
			})
			if o.clockWarn, err = a.cfg.clockWarn(); err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			return runWebhookServe(cmd.Context(), a, st, wc, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":8080", "address to listen on")
	f.Int64Var(&o.maxBody, "max-body", webhook.DefaultMaxBody, "largest body accepted, in bytes (larger: 413)")
	f.Int64Var(&o.maxPending, "max-pending", webhook.DefaultMaxPending, "bytes of bodies held in memory at once, before and while they are verified and stored (beyond: 503 with Retry-After)")
	f.IntVar(&o.maxConns, "max-conns", defaultMaxConns, "connections open at once (more wait to be accepted)")
	f.DurationVar(&o.tolerance, "tolerance", verify.DefaultTolerance, "how far a Standard Webhooks timestamp may be from now")
	f.BoolVar(&o.process, "process", true, "process stored deliveries in this process (false: leave them to msgq webhook process)")
	f.DurationVar(&o.poll, "poll", time.Second, "how often the worker looks again at parked statuses")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long requests in progress may finish")
	addClockWarnFlag(cmd)
	return cmd
}

func runWebhookServe(ctx context.Context, a *app, st store.Store, wc webhook.Config, o *webhookServeOptions) error {
	// The evidence it applies is timed on the store's clock; a host whose
	// clock is off is reported (and its offset recorded for stats).
	// Signature timestamps are checked against the store's clock as
	// measured from here too: a host whose own clock drifted would refuse
	// every signed delivery once past --tolerance.
	clk := newClockWatch(a, st, "webhook serve", "", o.clockWarn)
	cctx, stopClock := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClock()
	clk.start(cctx)
	wake := make(chan struct{}, 1)
	wc.Store, wc.MaxBody, wc.MaxPending, wc.Tolerance, wc.Log, wc.Now = st, o.maxBody, o.maxPending, o.tolerance, a.log, clk.Now
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit the collector works to keep under: the bodies
		// the budget admits, the garbage they leave, and the rest of the
		// process. The budget bounds what is live; this bounds the
		// garbage, which GOGC alone would let double the heap.
		debug.SetMemoryLimit(2*o.maxPending + 64<<20)
	}
	if o.process {
		wc.Stored = func() {
			select {
			case wake <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
	rcv := webhook.NewReceiver(wc)

	var workers sync.WaitGroup
	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	if o.process {
		p := &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities),
			TemplateIdentities: templateIdentities(a.cfg.Identities), Log: a.log}
		workers.Go(func() { p.Run(wctx, wake, o.poll) })
	}

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.addr)
	if err != nil {
		stopWorker()
		rcv.Close()
		return err
	}
	ln = netutil.LimitListener(ln, o.maxConns)
	srv := &http.Server{
		Handler:           rcv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are bounded by --max-body; a minute reads the largest
		// over a slow link, and stops a client that trickles forever.
		ReadTimeout:    time.Minute,
		WriteTimeout:   time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
	}
	srv.ConnState = keepAliveGovernor(srv, o.maxConns)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(a.ios.Err, "webhook: listening on http://%s\n", ln.Addr())

	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.grace)
	defer cancel()
	// Shutdown waits for handlers, each of which waits for its delivery's
	// write: every 200 sent was durable, every delivery cut off got none.
	if err := srv.Shutdown(sctx); err != nil {
		// The grace ran out with requests still in progress: their
		// connections are closed unanswered, so their providers retry.
		// What was handed to the committer is still written below.
		a.log.Warn("webhook: requests still in progress after --grace were cut off; their providers will retry", "err", err)
		srv.Close()
	}
	rcv.Close()
	stopWorker()
	workers.Wait()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	fmt.Fprintln(a.ios.Err, "webhook: stopped")
	return nil
}

// defaultMaxConns bounds webhook serve's open connections: well above what
// providers open (Meta sends from a few dozen connections), well below a
// process's usual file limit of 1024.
const defaultMaxConns = 512

// keepAliveGovernor returns a ConnState hook that turns keep-alives off
// while the open connections are near the cap, and on again once they are
// well below it. Without it, idle keep-alive connections (a client that
// opened many and went quiet, or an attacker) would hold every slot of the
// LimitListener for IdleTimeout while new deliveries wait to be accepted.
// SetKeepAlivesEnabled(false) also closes the idle ones at once.
func keepAliveGovernor(srv *http.Server, maxConns int) func(net.Conn, http.ConnState) {
	var (
		mu   sync.Mutex
		open int
		off  bool
	)
	high, low := maxConns*9/10, maxConns/2
	return func(_ net.Conn, cs http.ConnState) {
		mu.Lock()
		switch cs {
		case http.StateNew:
			open++
		case http.StateClosed, http.StateHijacked:
			open--
		}
		turn := 0
		switch {
		case !off && open >= high:
			off, turn = true, -1
		case off && open <= low:
			off, turn = false, 1
		}
		mu.Unlock()
		// Outside mu: closing idle connections takes the server's lock,
		// and their StateClosed calls come back here (from their own
		// goroutines).
		if turn != 0 {
			srv.SetKeepAlivesEnabled(turn > 0)
		}
	}
}

func newWebhookProcessCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "process",
		Short: "Process stored webhook deliveries and apply parked statuses, then exit",
		Long: `Process every stored delivery not processed yet, then apply every pending status
whose message is now known: for cron, when webhook serve runs with --process=false,
or to catch up after a crash. Running it again changes nothing.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
	return cmd
}

type webhookReplayOptions struct {
	provider  string
	identity  string
	webhookID string
}

func newWebhookReplayCmd(a *app) *cobra.Command {
	o := &webhookReplayOptions{}
	cmd := &cobra.Command{
		Use:   "replay FILE|-",
		Short: "Feed a captured webhook body through the same path as a received one",
		Long: `Store a captured webhook body (a file, or - for stdin) exactly as webhook serve
would after verifying it, then process it. For operators re-playing a delivery
from a provider's dashboard or a log, and for tests. The signature is not
checked: whoever can run msgq against the store is trusted already. Replaying a
body twice is safe: its statuses and inbound messages are counted as duplicates.

` + exitStatusHelp,
		Example: `  msgq webhook replay status.json
  msgq webhook replay --provider http --identity shop --webhook-id msg_2Yh... body.json`,
		Args: exactArgs(1, "one FILE (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.provider != store.WebhookWhatsApp && o.provider != store.WebhookHTTP {
				return usagef("--provider must be whatsapp or http (got %q)", o.provider)
			}
			if o.identity != "" {
				if _, ok := a.cfg.Identities[o.identity]; !ok {
					return usagef("--identity %s is not configured (see msgq identities)", o.identity)
				}
			}
			if o.identity == "" && o.provider == store.WebhookHTTP {
				// serve files an http delivery under the identity whose
				// secret verified it; with one http identity there is no
				// doubt which that was.
				var https []string
				for n, id := range a.cfg.Identities {
					if id.Config.WebhookSecretEnv != "" {
						https = append(https, n)
					}
				}
				switch len(https) {
				case 0:
					return usagef("--provider http needs --identity: no identity has webhook_secret_env")
				case 1:
				default:
					return usagef("--provider http needs --identity: %d identities have webhook_secret_env", len(https))
				}
				o.identity = https[0]
			}
			body, err := readReplay(a, args[0])
			if err != nil {
				return err
			}
			// The same check the endpoint makes: what it would refuse with
			// 400 is refused here, before anything is written.
			if o.provider == store.WebhookWhatsApp {
				_, err = payload.WhatsApp(body)
			} else {
				_, err = payload.HTTP(body, o.webhookID)
			}
			if err != nil {
				return usagef("%s: %v", args[0], err)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			hdr := map[string]string{"x-msgq-replay": args[0]}
			if o.webhookID != "" {
				hdr["webhook-id"] = o.webhookID
			}
			if err := st.WebhookStore(cmd.Context(), []store.WebhookEvent{{
				Provider: o.provider, Identity: o.identity, Headers: hdr, Body: body,
			}}); err != nil {
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.provider, "provider", store.WebhookWhatsApp, "whose format the body is in: whatsapp or http")
	f.StringVar(&o.identity, "identity", "", "the identity the delivery came for (default: whatsapp: the one with the body's phone_number_id; http: the only identity with webhook_secret_env)")
	f.StringVar(&o.webhookID, "webhook-id", "", "the delivery's webhook-id header (http): serve knows duplicates by it, so give it to replay a delivery serve may have had")
	return cmd
}

func readReplay(a *app, name string) ([]byte, error) {
	var (
		body []byte
		err  error
	)
	if name == "-" {
		body, err = io.ReadAll(io.LimitReader(a.ios.In, webhook.DefaultMaxBody+1))
	} else {
		body, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, usagef("%v", err)
	}
	if len(body) > webhook.DefaultMaxBody {
		return nil, usagef("%s: body over %d bytes", name, webhook.DefaultMaxBody)
	}
	return body, nil
}

// processStored processes every stored delivery and pending status, and
// prints what changed.
func processStored(ctx context.Context, a *app, st store.Store) error {
	p := &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities),
		TemplateIdentities: templateIdentities(a.cfg.Identities), Log: a.log}
	sum, err := p.Once(ctx)
	if err != nil {
		return err
	}
	return printProcessSummary(a, sum)
}

// printProcessSummary prints what processing did: a line on stderr, the
// changes on stdout (a table, or the summary as JSON).
func printProcessSummary(a *app, sum webhook.Summary) error {
	fmt.Fprintf(a.ios.Err, "webhook: %d deliveries (%d unreadable), %d new statuses, %d new inbound, %d duplicates; applied %d, recorded %d, refused %d, suspect %d, inbound linked %d, parked %d, held texts released %d\n",
		sum.Events, sum.Unreadable, sum.Statuses, sum.Inbound, sum.Duplicates, sum.Applied, sum.Recorded, sum.Refused, sum.Suspect, sum.Attributed, sum.Parked, sum.Released)
	if sum.Notices > 0 || sum.TemplateReleased > 0 {
		fmt.Fprintf(a.ios.Err, "webhook: %d new notices (msgq webhook notices); identities paused %d; template holds: %d rows held, %d released\n",
			sum.Notices, sum.PausedIdentities, sum.TemplateHeld, sum.TemplateReleased)
	}
	if a.cfg.Output == outJSON {
		if sum.Changes == nil {
			sum.Changes = []store.AppliedEvidence{}
		}
		return printJSON(a.ios.Out, sum)
	}
	if len(sum.Changes) == 0 {
		return nil
	}
	rows := make([][]string, 0, len(sum.Changes))
	for _, c := range sum.Changes {
		rows = append(rows, []string{c.MessageID, string(c.Status), string(c.From), string(c.To), c.Outcome, c.Detail})
	}
	return printTable(a.ios.Out, []string{"ID", "STATUS", "FROM", "TO", "OUTCOME", "DETAIL"}, rows)
}

func newWebhookParkedCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "Statuses waiting for a message with their provider id, oldest first",
		Long: `List the statuses no message could take yet: their provider id is not recorded
on any message (the drain has not recorded its answer, or the message was sent
by another system on the same number), or their message is still leased by a
drain. They are applied as soon as their message is known (by webhook serve's
worker, msgq webhook process or msgq reconcile); none is dropped. -o json prints
an array of statuses.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			evs, err := st.EvidenceList(cmd.Context(), "", limit)
			if err != nil {
				return err
			}
			return printRows(a, evs, []string{"RECEIVED", "PROVIDER", "IDENTITY", "PROVIDER_ID", "STATUS", "AT", "REF", "CODE"},
				func(e *store.StatusEvidence) []string {
					return []string{stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), e.ProviderID,
						string(e.Status), stamp(e.At), orDash(e.CallbackRef), orDash(e.ErrorCode)}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many statuses")
	return cmd
}

// suspectList is webhook suspect's JSON. Field names are a contract.
type suspectList struct {
	Statuses   []store.StatusEvidence `json:"statuses"`
	Collisions []store.Collision      `json:"collisions"`
}

func newWebhookSuspectCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "suspect",
		Short: "Statuses set aside because they disagree with their message, and provider id collisions",
		Long: `List the evidence msgq would not apply because it contradicts itself, oldest first:

  - statuses whose own reference (WhatsApp's biz_opaque_callback_data, the http
    API's ref) names another message than their provider id does, or whose
    recipient is not the message's, or that came through an identity other
    than the message's (or a WhatsApp number no identity has);
  - provider id collisions: messages of one identity that share a provider id
    (rows written before ids were unique per identity, or a provider that
    issued an id twice). Statuses naming such an id are set aside too.

None of it moved a message. Look at the messages named (msgq show ID) and
settle them if the evidence says what became of them (msgq resolve ID --as
sent|failed --note ...). -o json prints {statuses, collisions}.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			sus, err := st.EvidenceSuspects(cmd.Context(), limit)
			if err != nil {
				return err
			}
			col, err := st.ProviderIDCollisions(cmd.Context(), limit)
			if err != nil {
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, suspectList{Statuses: sus, Collisions: col})
			}
			rows := make([][]string, 0, len(sus))
			for _, e := range sus {
				rows = append(rows, []string{stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), e.ProviderID, string(e.Status),
					orDash(e.CallbackRef), oneLine(e.Suspect)})
			}
			if err := printTable(a.ios.Out, []string{"RECEIVED", "PROVIDER", "IDENTITY", "PROVIDER_ID", "STATUS", "REF", "WHY"}, rows); err != nil {
				return err
			}
			if len(col) == 0 {
				return nil
			}
			fmt.Fprintln(a.ios.Out, "\nPROVIDER ID COLLISIONS")
			rows = rows[:0]
			for _, c := range col {
				rows = append(rows, []string{c.Identity, c.ProviderID, c.MessageID, string(c.State), stamp(c.CreatedAt)})
			}
			return printTable(a.ios.Out, []string{"IDENTITY", "PROVIDER_ID", "ID", "STATE", "CREATED"}, rows)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many statuses (and as many collisions)")
	return cmd
}

func newWebhookNoticesCmd(a *app) *cobra.Command {
	var (
		limit int
		kind  string
	)
	cmd := &cobra.Command{
		Use:   "notices",
		Short: "What providers said about identities rather than messages, newest first",
		Long: `List what webhooks said about an account, a number or a template rather than a
message, and whatever msgq did not understand, newest first:

  error     an error about the number or account (WhatsApp value.errors, e.g.
            130429); one the retry table calls the identity's (a token, a
            locked account) paused the identity (msgq identities)
  template  a template's status (message_template_status_update): PAUSED,
            DISABLED or REJECTED holds the queued rows that use it on the
            account's identities; APPROVED releases them
  quality   the number's quality rating or messaging limit
  account   account updates, reviews and alerts
  unknown   a field or event type msgq does not read: kept, counted (stats:
            unknown_notices) and listed here, never silently dropped

-o json prints an array of notices (detail is the provider's JSON, verbatim).

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			switch kind {
			case "", store.NoticeError, store.NoticeTemplate, store.NoticeQuality, store.NoticeAccount, store.NoticeUnknown:
			default:
				return usagef("--kind must be error, template, quality, account or unknown (got %q)", kind)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ns, err := st.NoticeList(cmd.Context(), kind, limit)
			if err != nil {
				return err
			}
			return printRows(a, ns, []string{"RECEIVED", "IDENTITY", "KIND", "FIELD", "CODE", "SUBJECT", "VALUE"},
				func(n *store.Notice) []string {
					subject := n.Subject
					if n.Lang != "" {
						subject += " (" + n.Lang + ")"
					}
					return []string{stamp(n.ReceivedAt), orDash(n.Identity), n.Kind, orDash(n.Field), orDash(n.Code),
						orDash(subject), orDash(oneLine(n.Value))}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many notices")
	cmd.Flags().StringVar(&kind, "kind", "", "only notices of this kind: error, template, quality, account or unknown")
	return cmd
}

func newWebhookUnreadableCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "unreadable",
		Short: "Stored deliveries processing could not read (in whole or in part), oldest first",
		Long: `List the deliveries that were stored (answered 200) but that processing could
not read, or read only in part (items skipped): a parser that does not know a
new shape, or a database limit. Their raw bodies are kept, and purge keeps them.
Look at one with msgq webhook show ID; once msgq reads it (a newer msgq), put it
back with msgq webhook retry ID. -o json prints an array of deliveries.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			evs, err := st.WebhookUnreadable(cmd.Context(), limit)
			if err != nil {
				return err
			}
			return printRows(a, evs, []string{"ID", "RECEIVED", "PROVIDER", "IDENTITY", "BYTES", "ERROR"},
				func(e *store.WebhookEvent) []string {
					return []string{e.ID, stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), strconv.Itoa(len(e.Body)), oneLine(e.Error)}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many deliveries")
	return cmd
}

func newWebhookShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "One stored delivery: its headers, times, error, and raw body",
		Long: `Show one stored webhook delivery. The table form prints the headers msgq kept,
the times and any processing error, then the raw body exactly as received (so
that it can be saved and replayed). -o json prints the delivery as an object
(body base64-encoded).

` + exitStatusHelp,
		Args: exactArgs(1, "one delivery ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ev, err := st.WebhookGet(cmd.Context(), args[0])
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no webhook delivery %s: %w", args[0], err)
				}
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, ev)
			}
			names := make([]string, 0, len(ev.Headers))
			for k := range ev.Headers {
				names = append(names, k)
			}
			sort.Strings(names)
			fields := [][]string{{"id:", ev.ID}, {"provider:", ev.Provider}, {"identity:", orDash(ev.Identity)},
				{"received:", stamp(ev.ReceivedAt)}, {"processed:", stampPtr(ev.ProcessedAt)}, {"error:", orDash(oneLine(ev.Error))}}
			for _, k := range names {
				fields = append(fields, []string{k + ":", ev.Headers[k]})
			}
			if err := printTable(a.ios.Out, nil, fields); err != nil {
				return err
			}
			fmt.Fprintln(a.ios.Out, "\nBODY")
			_, err = a.ios.Out.Write(append(ev.Body, '\n'))
			return err
		},
	}
}

func newWebhookRetryCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Process an unreadable delivery again (after upgrading msgq, say)",
		Long: `Put a delivery that processing could not read (see msgq webhook unreadable)
back in the queue and process it now. What it already gave is not applied
twice: its statuses and inbound messages are deduplicated as usual. A delivery
that was read cleanly, or is still waiting, is refused (exit 2).

` + exitStatusHelp,
		Args: exactArgs(1, "one delivery ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.WebhookRetry(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no webhook delivery %s: %w", args[0], err)
				}
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
}
