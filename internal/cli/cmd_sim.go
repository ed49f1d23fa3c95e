package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/webhook/verify"
)

func newSimCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the fault-injecting provider simulator",
		Long: `The simulator plays a messaging provider with injected faults and logs every
message that reached the phone: the oracle for exactly-once tests.

` + exitStatusHelp,
		// Without this a mistyped subcommand would print the help and exit 0.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for \"msgq sim\" (want serve)", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSimServeCmd(a))
	return cmd
}

type simServeOptions struct {
	addr string
	cfg  sim.Config
	// The environment variables holding the webhook secrets: the secrets
	// themselves never appear on a command line.
	webhookSecretEnv string
	appSecretEnv     string
	twilioTokenEnv   string
	// smtpAddr is where the SMTP server listens ("" none).
	smtpAddr string
	smtp     sim.SMTPConfig
}

// validate checks every flag, naming the first bad one as the user typed it.
func (o *simServeOptions) validate() error {
	c := &o.cfg
	for _, f := range []struct {
		name string
		p    float64
	}{
		{"fault-429", c.Fault429}, {"fault-5xx", c.Fault5xx}, {"fault-permanent", c.FaultPermanent},
		{"fault-pair", c.FaultPair}, {"fault-drop", c.FaultDrop}, {"fault-slow", c.FaultSlow},
	} {
		if !(f.p >= 0 && f.p <= 1) { // NaN included
			return usagef("--%s must be a probability between 0 and 1 (got %v)", f.name, f.p)
		}
	}
	if c.Latency < 0 {
		return usagef("--latency must not be negative (got %v)", c.Latency)
	}
	if c.SlowDelay <= 0 {
		return usagef("--slow-delay must be greater than 0 (got %v)", c.SlowDelay)
	}
	if c.StatusDelay <= 0 {
		return usagef("--status-delay must be greater than 0 (got %v)", c.StatusDelay)
	}
	if c.ReadAfter < 0 {
		return usagef("--read-after must not be negative (got %v)", c.ReadAfter)
	}
	if err := o.webhookSecrets(); err != nil {
		return err
	}
	if err := o.twilioToken(); err != nil {
		return err
	}
	if err := c.Validate(); err != nil { // the sum of the probabilities
		return usagef("%v", err)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usagef("--addr %q: %v", o.addr, err)
	}
	return o.validateSMTP()
}

// validateSMTP checks the SMTP server's flags.
func (o *simServeOptions) validateSMTP() error {
	faults := o.smtp.Fault4xx != 0 || o.smtp.Fault5xx != 0 || o.smtp.FaultDrop != 0
	if o.smtpAddr == "" {
		if faults {
			return usagef("--smtp-fault-4xx, --smtp-fault-5xx and --smtp-fault-drop need --smtp-addr")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(o.smtpAddr); err != nil {
		return usagef("--smtp-addr %q: %v", o.smtpAddr, err)
	}
	for _, f := range []struct {
		name string
		p    float64
	}{{"smtp-fault-4xx", o.smtp.Fault4xx}, {"smtp-fault-5xx", o.smtp.Fault5xx}, {"smtp-fault-drop", o.smtp.FaultDrop}} {
		if !(f.p >= 0 && f.p <= 1) { // NaN included
			return usagef("--%s must be a probability between 0 and 1 (got %v)", f.name, f.p)
		}
	}
	if err := o.smtp.Validate(); err != nil { // the sum
		return usagef("%v", oneLine(err.Error()))
	}
	return nil
}

// webhookSecrets checks the webhook flags and reads the secrets from the
// environment. No message quotes a secret or the URL (it may hold a
// password).
func (o *simServeOptions) webhookSecrets() error {
	c := &o.cfg
	if c.WebhookURL == "" {
		if o.webhookSecretEnv != "" || o.appSecretEnv != "" {
			return usagef("--webhook-secret-env and --app-secret-env need --webhook-url")
		}
		return nil
	}
	if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		return usagef("--webhook-url must be an http:// or https:// URL with a host and no query, e.g. http://127.0.0.1:8080")
	}
	if o.webhookSecretEnv == "" && o.appSecretEnv == "" {
		return usagef("--webhook-url needs --webhook-secret-env (http API) or --app-secret-env (WhatsApp): nothing could be signed")
	}
	if n := o.webhookSecretEnv; n != "" {
		v := os.Getenv(n)
		if strings.TrimSpace(v) == "" {
			return usagef("--webhook-secret-env: environment variable %s is not set", n)
		}
		for _, f := range strings.Fields(v) {
			sec, err := verify.ParseSecret(f)
			if err != nil {
				return usagef("--webhook-secret-env: %s does not hold whsec_ secrets", n)
			}
			c.WebhookSecrets = append(c.WebhookSecrets, sec)
		}
	}
	if n := o.appSecretEnv; n != "" {
		v := os.Getenv(n)
		if v == "" {
			return usagef("--app-secret-env: environment variable %s is not set", n)
		}
		c.AppSecret = []byte(v)
	}
	return nil
}

// twilioToken checks the Twilio flags and reads the auth token from the
// environment. No message quotes the token or the URL.
func (o *simServeOptions) twilioToken() error {
	c := &o.cfg
	if n := o.twilioTokenEnv; n != "" {
		v := os.Getenv(n)
		if v == "" {
			return usagef("--twilio-token-env: environment variable %s is not set", n)
		}
		c.TwilioAuthToken = v
	}
	if c.TwilioInboundURL != "" {
		if u, err := url.Parse(c.TwilioInboundURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
			return usagef("--twilio-inbound-url must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/webhooks/twilio")
		}
		if c.TwilioAuthToken == "" {
			return usagef("--twilio-inbound-url needs --twilio-token-env: the inbound messages could not be signed")
		}
	}
	return nil
}

func newSimServeCmd(a *app) *cobra.Command {
	o := &simServeOptions{cfg: sim.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the simulated provider APIs over HTTP",
		Long: `Serve the simulated provider APIs over HTTP until interrupted (SIGINT or SIGTERM):

  POST   /v1/messages                           the generic http API (Idempotency-Key)
  GET    /v1/messages/{id}                      look-up
  POST   /{version}/{phone-number-id}/messages  the WhatsApp Cloud API send
  POST   /2010-04-01/Accounts/{sid}/Messages.json        the Twilio Messages API send (form)
  GET    /2010-04-01/Accounts/{sid}/Messages/{sid}.json  Twilio: fetch one message
  GET    /2010-04-01/Accounts/{sid}/Messages.json        Twilio: list (To, From, DateSent filters)
  POST   /sim/twilio/inbound                    inject an inbound SMS {"from","to","body"}
  GET    /deliveries                            every message that reached the phone, in order
  DELETE /deliveries                            empty that log
  GET    /calls                                 every call decided (replays and refusals too), in order
  POST   /sim/clock                             {"advance":"20m"}: move the simulator's clock forward (tests)
  GET    /sim/smtp/mails                        with --smtp-addr: every mail accepted, as received (raw in base64)

Any non-empty bearer token is accepted; the Twilio API takes basic auth with
the path's account SID (or an SK... API key) and any non-empty password. Each send that passes authentication
and validation takes one draw from a random source seeded by --seed and gets
at most one fault, tested in this order: 429, 5xx, permanent, pair, drop,
slow. The probabilities may add up to at most 1.

  --fault-429        refused: rate limited (http: 429 + Retry-After: 1; WhatsApp: 400, code 130429;
                     Twilio: 429, code 20429 + Retry-After: 1)
  --fault-5xx        refused: server error (http: 500 internal; WhatsApp: 500, code 131000;
                     Twilio: 500, code 20500)
  --fault-permanent  refused: undeliverable (http: 422 invalid_recipient; WhatsApp: 400, code 131026;
                     Twilio: 400, code 21614)
  --fault-pair       refused: pair rate limit (http: 429 pair_rate_limited; WhatsApp: 400, code 131056;
                     Twilio, which has none: as --fault-429)
  --fault-drop       processed (a new message is delivered), then the connection is
                     closed without an answer
  --fault-slow       processed (a new message is delivered), answered only after
                     --slow-delay, i.e. after the client gave up

Refused sends deliver nothing and leave no idempotency key behind. A dropped
or slow send is processed exactly as with no fault: a key already accepted is
replayed, not delivered again. --latency
delays every send before it is decided (a mail's, with --smtp-addr, after
its final "."; a client that hangs up meanwhile gets nothing delivered).
With --idempotent=false the http API ignores Idempotency-Key: every accepted
call is a new delivery. The WhatsApp API has no idempotency key at all.

With --webhook-url (the base URL of msgq webhook serve), every message the
http or WhatsApp API accepts is reported by status webhooks, as the real
providers do: "sent" at once, "delivered" --status-delay later, and "read"
--read-after after that (0: never). A message whose answer --fault-drop or
--fault-slow lost was accepted all the same, so its statuses come too,
carrying the send's ref (WhatsApp: biz_opaque_callback_data): that is how msgq
settles a message it marked unknown. Refused sends and replays send none.

  http API  POST URL/webhooks/http, one message.status event per request, signed
            with Standard Webhooks by each whsec_ secret in --webhook-secret-env
  WhatsApp  POST URL/webhooks/whatsapp, the Cloud API envelope (phone_number_id:
            the one in the send's URL), signed with --app-secret-env's secret

  Twilio    with --twilio-token-env, each accepted message's status callbacks
            ("sent", then "delivered") are posted as forms to the StatusCallback
            URL the send gave, signed with X-Twilio-Signature by that token

An API whose secret is not given sends no webhooks. With --twilio-inbound-url
(and the token), POST /sim/twilio/inbound posts a signed inbound message
there at once; STOP (and Twilio's other opt-out keywords) makes later sends
from that sender to that number fail with 21610 until START. A webhook that fails
(no connection, or not 2xx) is retried 4 times, 1s, 2s, 4s and 8s later, then
dropped with a log line. Webhooks never hold up a send: when their queue is
full they are dropped and counted. At shutdown one more line counts them.

With --smtp-addr the simulator also runs an SMTP server there (plain SMTP,
no TLS and no AUTH: an identity of provider smtp reaches it with tls: none).
Each mail it accepts is logged in /deliveries once per recipient, with api
"smtp", channel "email", the Message-ID as id, the msgq message id in it as
ref and the decoded subject. Faults are chosen by the recipient's local part
(so a test picks the outcome by the address it sends to):

  bounce+...@    550 5.1.1 at RCPT TO                 nothing delivered
  defer+...@     451 4.7.1 at RCPT TO (greylisting)   nothing delivered
  reject+...@    554 5.7.1 after the final "."        nothing delivered
  tempfail+...@  451 4.3.0 after the final "."        nothing delivered
  drop+...@      delivered, then the connection is closed without a reply to the "."

or drawn for other mails with --smtp-fault-4xx, --smtp-fault-5xx and
--smtp-fault-drop (from the same seeded source as the HTTP APIs' faults).

One line, "sim: listening on http://ADDR", is printed to stderr once the
server listens (with --addr 127.0.0.1:0 it names the port chosen); with
--smtp-addr it reads "sim: listening on http://ADDR and smtp://ADDR".

` + exitStatusHelp,
		Example: `  msgq sim serve
  msgq sim serve --addr 127.0.0.1:0 --seed 7 --fault-429 0.1 --fault-drop 0.05
  msgq sim serve --fault-slow 0.2 --slow-delay 5s --latency 50ms --idempotent=false
  SIM_APP_SECRET=... msgq sim serve --webhook-url http://127.0.0.1:8080 --app-secret-env SIM_APP_SECRET --read-after 1s
  SIM_TWILIO_TOKEN=... msgq sim serve --twilio-token-env SIM_TWILIO_TOKEN --twilio-inbound-url http://127.0.0.1:8080/webhooks/twilio
  msgq sim serve --addr 127.0.0.1:0 --smtp-addr 127.0.0.1:0 --smtp-fault-4xx 0.1
  curl -s localhost:8099/deliveries`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runSimServe(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	c := &o.cfg
	f.StringVar(&o.addr, "addr", "127.0.0.1:8099", "listen on this host:port (port 0: any free port)")
	f.Float64Var(&c.Fault429, "fault-429", 0, "probability of a rate-limit refusal with Retry-After")
	f.Float64Var(&c.Fault5xx, "fault-5xx", 0, "probability of a retryable server error")
	f.Float64Var(&c.FaultPermanent, "fault-permanent", 0, "probability of a permanent refusal")
	f.Float64Var(&c.FaultPair, "fault-pair", 0, "probability of a WhatsApp pair rate limit (131056)")
	f.Float64Var(&c.FaultDrop, "fault-drop", 0, "probability of accepting, then closing the connection without an answer")
	f.Float64Var(&c.FaultSlow, "fault-slow", 0, "probability of accepting, then answering only after --slow-delay")
	f.DurationVar(&c.SlowDelay, "slow-delay", sim.DefaultSlowDelay, "how long a slow answer takes")
	f.DurationVar(&c.Latency, "latency", 0, "delay before every send is decided")
	f.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the fault decisions: one seed, one sequence of outcomes")
	f.BoolVar(&c.Idempotent, "idempotent", true, "honour Idempotency-Key on the http API")
	f.StringVar(&c.WebhookURL, "webhook-url", "", "send status webhooks to this msgq webhook serve, e.g. http://127.0.0.1:8080 (default: none)")
	f.StringVar(&o.webhookSecretEnv, "webhook-secret-env", "", "environment variable holding the whsec_ secret(s) that sign the http API's webhooks")
	f.StringVar(&o.appSecretEnv, "app-secret-env", "", "environment variable holding the app secret that signs the WhatsApp webhooks")
	f.StringVar(&o.twilioTokenEnv, "twilio-token-env", "", "environment variable holding the auth token that signs the Twilio API's callbacks and inbound messages")
	f.StringVar(&c.TwilioInboundURL, "twilio-inbound-url", "", "post injected inbound SMS (POST /sim/twilio/inbound) to this URL (default: none)")
	f.StringVar(&o.smtpAddr, "smtp-addr", "", "also serve SMTP on this host:port (port 0: any free port; default: none)")
	f.Float64Var(&o.smtp.Fault4xx, "smtp-fault-4xx", 0, `probability of a 451 4.3.0 reply to a mail's final "."`)
	f.Float64Var(&o.smtp.Fault5xx, "smtp-fault-5xx", 0, `probability of a 554 5.7.1 reply to a mail's final "."`)
	f.Float64Var(&o.smtp.FaultDrop, "smtp-fault-drop", 0, `probability of accepting a mail, then closing the connection without a reply to its "."`)
	f.DurationVar(&c.StatusDelay, "status-delay", sim.DefaultStatusDelay, `time from "sent" to "delivered"`)
	f.DurationVar(&c.ReadAfter, "read-after", 0, `time from "delivered" to "read" (0: no "read")`)
	return cmd
}

func runSimServe(ctx context.Context, a *app, o *simServeOptions) error {
	o.cfg.Log = a.log
	s := sim.New(o.cfg)
	defer s.Close()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.addr)
	if err != nil {
		return err
	}
	handler := s.Handler()
	listening := "http://" + ln.Addr().String()
	if o.smtpAddr != "" {
		ms, err := s.NewSMTPServer(o.smtp)
		if err != nil {
			ln.Close()
			return usagef("%v", err)
		}
		addr, err := ms.Listen(o.smtpAddr)
		if err != nil {
			ln.Close()
			return err
		}
		defer ms.Close()
		listening += " and smtp://" + addr.String()
		handler = withMails(handler, ms)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		// Long enough for the slowest answer the flags allow.
		WriteTimeout:   o.cfg.Latency + o.cfg.SlowDelay + time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		// Handlers waiting out a latency or a slow answer stop at shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(a.ios.Err, "sim: listening on %s\n", listening)

	select {
	case err := <-served:
		return err // Serve never returns nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("sim: shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if o.cfg.WebhookURL != "" || o.cfg.TwilioAuthToken != "" {
		s.Close()
		st := s.WebhookStats()
		fmt.Fprintf(a.ios.Err, "sim: webhooks: %d sent, %d retried, %d failed, %d dropped\n", st.Sent, st.Retried, st.Failed, st.Dropped)
	}
	return nil
}

// withMails adds GET /sim/smtp/mails to h: every mail the SMTP server
// accepted, as received (raw is base64 in the JSON), so a test can read
// the message itself and not only the delivery log's summary of it.
func withMails(h http.Handler, ms *sim.SMTPServer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /sim/smtp/mails", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mails := ms.Mails()
		if mails == nil {
			mails = []sim.Mail{}
		}
		_ = json.NewEncoder(w).Encode(mails)
	})
	return mux
}
