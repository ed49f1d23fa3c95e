package cli

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
)

type webhookReplayOptions struct {
	provider  string
	identity  string
	webhookID string
	url       string
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
Unlike webhook serve, which stores one copy of a delivery, replay always stores
the file's copy, so that processing reads it and says what it found.

` + exitStatusHelp,
		Example: `  msgq webhook replay status.json
  msgq webhook replay --provider http --identity shop --webhook-id msg_2Yh... body.json
  msgq webhook replay --provider twilio --url 'https://hooks.example.com/webhooks/twilio/sms-us?msgq_id=01J...' form.txt`,
		Args: exactArgs(1, "one FILE (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			k := kinds.ByFormat(o.provider)
			if k == nil {
				return usagef("--provider must be %s (got %q)", kinds.OrList(kinds.Formats()), o.provider)
			}
			w := k.Webhook
			if o.url != "" && !w.KeepsCall {
				return usagef("--url is for --provider %s (its webhooks name their row in the URL)", kinds.OrList(replayURLFormats()))
			}
			if o.identity != "" {
				if _, ok := a.cfg.Identities[o.identity]; !ok {
					return usagef("--identity %s is not configured (see msgq identities)", o.identity)
				}
			}
			if o.identity == "" && !w.NamesSender {
				// serve files a delivery whose items name no sender under
				// the identity whose secret verified it; with one such
				// identity there is no doubt which that was.
				var names []string
				for n, id := range a.cfg.Identities {
					if id.ReceivesWebhooks() && id.Kind.Webhook.Name == o.provider {
						names = append(names, n)
					}
				}
				switch len(names) {
				case 0:
					return usagef("--provider %s needs --identity: no identity has %s", o.provider, w.SecretKey)
				case 1:
				default:
					return usagef("--provider %s needs --identity: %d identities have %s", o.provider, len(names), w.SecretKey)
				}
				o.identity = names[0]
			}
			body, err := readReplay(a, args[0])
			if err != nil {
				return err
			}
			hdr := map[string]string{"x-msgq-replay": args[0]}
			if o.webhookID != "" {
				hdr["webhook-id"] = o.webhookID
			}
			var received time.Time
			if w.KeepsCall {
				// As serve keeps them (provider.Webhook.KeepsCall): the URL
				// the provider called, and now as the time received.
				received = time.Now().UTC().Truncate(store.Resolution)
				hdr[provider.HeaderURL] = o.url
				hdr[provider.HeaderReceivedAt] = received.Format(time.RFC3339Nano)
			}
			// The same check the endpoint makes: what it would refuse with
			// 400 is refused here, before anything is written.
			_, err = w.Parse(body, hdr)
			if err != nil {
				return usagef("%s: %v", args[0], err)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.WebhookStore(cmd.Context(), []store.WebhookEvent{{
				Provider: o.provider, Identity: o.identity, Headers: hdr, Body: body, ReceivedAt: received,
			}}); err != nil {
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.provider, "provider", store.WebhookWhatsApp, "whose format the body is in: "+replayFormatsHelp())
	f.StringVar(&o.identity, "identity", "", "the identity the delivery came for (default: "+replayIdentityHelp()+")")
	f.StringVar(&o.url, "url", "", kinds.OrList(replayURLFormats())+": the URL the provider called, as it signed it (it names the row; without it statuses are matched by the provider's id alone)")
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

// replayFormatsHelp lists the webhook formats (kinds.Formats) with what a
// body in each is, where its kind says (provider.Webhook.Body).
func replayFormatsHelp() string {
	formats := kinds.Formats()
	var notes []string
	for _, f := range formats {
		if b := kinds.ByFormat(f).Webhook.Body; b != "" {
			notes = append(notes, f+": "+b)
		}
	}
	help := kinds.OrList(formats)
	if len(notes) > 0 {
		help += " (" + strings.Join(notes, "; ") + ")"
	}
	return help
}

// replayIdentityHelp says, per format, which identity a replay without
// --identity is filed under.
func replayIdentityHelp() string {
	var parts []string
	for _, f := range kinds.Formats() {
		w := kinds.ByFormat(f).Webhook
		if w.NamesSender {
			parts = append(parts, f+": the one the body's items name")
		} else {
			parts = append(parts, f+": the only identity with "+w.SecretKey)
		}
	}
	return strings.Join(parts, "; ")
}

// replayURLFormats are the formats whose kinds keep the URL the provider
// called (provider.Webhook.KeepsCall): the ones --url is for.
func replayURLFormats() []string {
	var out []string
	for _, f := range kinds.Formats() {
		if kinds.ByFormat(f).Webhook.KeepsCall {
			out = append(out, f)
		}
	}
	return out
}
