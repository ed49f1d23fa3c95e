package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/payload"
)

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
