package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/events"
	"github.com/msgq/msgq/internal/store"
)

func newEndpointsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoints",
		Short: "Where status events go: the applications' endpoints (add, list, remove, retry, deliver)",
		Long: `A tenant's endpoint receives a signed JSON event (Standard Webhooks: webhook-id,
webhook-timestamp, webhook-signature) for every change of its messages into
sent, delivered, read, failed or unknown, and for every challenge that completes
or expires. The events are written in the transaction of the change itself (an
outbox), delivered at least once, in order per message, retried with backoff and
jitter, and given up on (dead) after a bound: msgq endpoints list shows failing
endpoints, msgq stats counts the backlog. See docs/events.md.

` + exitStatusHelp,
		Args: exactArgs(0, "a subcommand (add, list, remove, retry or deliver)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newEndpointsAddCmd(a), newEndpointsListCmd(a), newEndpointsRemoveCmd(a), newEndpointsRetryCmd(a),
		newEndpointsDeliverCmd(a))
	return cmd
}

// endpointAdded is what endpoints add prints: the only time the secret is
// shown.
type endpointAdded struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

func newEndpointsAddCmd(a *app) *cobra.Command {
	var rawURL string
	cmd := &cobra.Command{
		Use:   "add --url URL",
		Short: "Register an endpoint for a tenant's status events; prints its signing secret once",
		Long: `Register an endpoint: from now on every status event of the tenant's messages
is delivered to it (events of changes made before are not). The signing secret
(whsec_...) is printed once, here: give it to the application, which verifies
each delivery with it (any Standard Webhooks library does). msgq keeps it to
sign; it is never printed again.

` + exitStatusHelp,
		Example: `  msgq endpoints add --tenant shop --url https://shop.internal/msgq/events
  msgq endpoints add --url https://app.example/hooks -o json`,
		Args: exactArgs(0, "no arguments (the URL goes in --url)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(rawURL)
			if rawURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return usagef("--url must be an absolute http or https URL (got %q)", rawURL)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			id, err := events.NewEndpointID()
			if err != nil {
				return err
			}
			secret, err := events.NewSecret()
			if err != nil {
				return err
			}
			e := &store.Endpoint{ID: id, Tenant: a.cfg.Tenant, URL: rawURL, Secret: secret}
			if err := st.EndpointAdd(cmd.Context(), e); err != nil {
				return err
			}
			out := endpointAdded{ID: e.ID, Tenant: e.Tenant, URL: e.URL, Secret: secret}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, out)
			}
			fmt.Fprintf(a.ios.Out, "%s\t%s\t%s\nsecret: %s\n", out.ID, out.Tenant, out.URL, out.Secret)
			fmt.Fprintln(a.ios.Err, "endpoints: the secret is shown only now; give it to the application to verify the events")
			return nil
		},
	}
	cmd.Flags().StringVar(&rawURL, "url", "", "where the events are POSTed (required)")
	cmd.Flags().String("tenant", "", "the tenant whose events go there (default \"default\") [MSGQ_TENANT]")
	return cmd
}

func newEndpointsListCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Endpoints with their backlog, dead events and health; failing ones are marked",
		Long: `List the endpoints, by tenant, with their backlog (PENDING: events not yet
delivered; DEAD: given up on after their attempts, see endpoints retry), the
consecutive failures of their latest deliveries, the last error and the last
success. An endpoint whose latest delivery failed is marked FAILING in the
STATUS column. -o json prints an array of objects with id, tenant, url,
created_at, disabled_at, consecutive_failures, last_error, last_success_at,
last_failure_at, pending, dead, delivered and oldest_pending_at (never the
secret).

` + exitStatusHelp,
		Example: `  msgq endpoints list
  msgq endpoints list --tenant shop -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			tenant := ""
			if cmd.Flags().Changed("tenant") {
				tenant = a.cfg.Tenant
			}
			eps, err := st.EndpointList(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			return printRows(a, eps, []string{"ID", "TENANT", "URL", "STATUS", "PENDING", "DEAD", "FAILURES", "LAST SUCCESS", "LAST ERROR"},
				func(e *store.EndpointStatus) []string {
					return []string{e.ID, e.Tenant, e.URL, endpointHealth(e), strconv.Itoa(e.Pending), strconv.Itoa(e.Dead),
						strconv.Itoa(e.ConsecutiveFailures), stampPtr(e.LastSuccessAt), orDash(e.LastError)}
				})
		},
	}
	cmd.Flags().String("tenant", "", "only this tenant's endpoints (default: every tenant's)")
	return cmd
}

// endpointHealth is an endpoint's status for people: FAILING stands out.
func endpointHealth(e *store.EndpointStatus) string {
	switch {
	case e.DisabledAt != nil:
		return "disabled"
	case e.ConsecutiveFailures > 0:
		return "FAILING"
	case e.Dead > 0:
		return "ok (dead events)"
	}
	return "ok"
}

func newEndpointsRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove an endpoint and its undelivered events",
		Long: `Remove an endpoint: no further events are written for it, and those not yet
delivered are dropped.

` + exitStatusHelp,
		Example: `  msgq endpoints remove ep_3f2a9c0d1e4b5a67`,
		Args:    exactArgs(1, "one endpoint id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.EndpointRemove(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.ios.Err, "endpoints: removed %s\n", args[0])
			return nil
		},
	}
}

func newEndpointsRetryCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Send an endpoint's dead events again (once the application is fixed)",
		Long: `Put an endpoint's dead events (their attempts ran out) back to pending, due now
with their attempts counted from zero. They keep their ids, so an application
that saw one before can tell. -o json prints {"endpoint": ID, "retried": N}.

` + exitStatusHelp,
		Example: `  msgq endpoints retry ep_3f2a9c0d1e4b5a67 && msgq endpoints deliver`,
		Args:    exactArgs(1, "one endpoint id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEndpointsRetry(cmd.Context(), a, args[0])
		},
	}
}

func runEndpointsRetry(ctx context.Context, a *app, id string) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	n, err := st.EndpointRetry(ctx, id)
	if err != nil {
		return err
	}
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, map[string]any{"endpoint": id, "retried": n})
	}
	fmt.Fprintf(a.ios.Err, "endpoints: %d dead events of %s are pending again\n", n, id)
	return nil
}
