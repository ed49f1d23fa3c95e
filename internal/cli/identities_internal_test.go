package cli

import (
	"slices"
	"testing"

	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/identities"
)

// TestIdentitiesJSONFieldsArePinned pins identities -o json (docs/json.md)
// and stats' queued_unsendable items. Add, never rename.
func TestIdentitiesJSONFieldsArePinned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"an identity", identityRow{}, []string{"channels", "configured", "daily_recipients_limit", "daily_recipients_used", "last_notice", "missing_env", "name", "paused", "paused_at", "paused_reason",
			"per_recipient_default", "per_recipient_interval", "provider", "queued", "quiet_hours", "quiet_zone", "rate", "rate_default", "sending", "sends_here",
			"service_window", "template_holds", "unknown", "webhooks"}},
		{"a queue that cannot send from here", health.Unsendable{}, []string{"identity", "queued", "why"}},
	} {
		if got := jsonKeys(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JSON fields %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestATwilioIdentityExpectsProgressOnlyWithAStatusCallback: every twilio
// identity receives webhooks (inbound SMS, verified with its auth token),
// but only one with a status_callback gets statuses, so only its accepted
// sends are expected to progress (stats, health).
func TestATwilioIdentityExpectsProgressOnlyWithAStatusCallback(t *testing.T) {
	t.Parallel()
	tw := map[string]any{"account_sid_env": "S", "auth_token_env": "T", "from": "+15005550006"}
	withCB := map[string]any{"status_callback": "https://hooks.example.com/webhooks/twilio/loud"}
	for k, v := range tw {
		withCB[k] = v
	}
	withCB["from"] = "+15005550007" // two identities on one number are refused
	ids, err := identities.Parse(map[string]identities.Config{"quiet": {Provider: "twilio", Settings: tw},
		"loud": {Provider: "twilio", Settings: withCB}})
	if err != nil {
		t.Fatal(err)
	}
	delete(ids, identities.BuiltinSim)
	for name, id := range ids {
		if !id.ReceivesWebhooks() {
			t.Errorf("%s does not receive webhooks", name)
		}
	}
	if got := progressIdentities(ids); !slices.Equal(got, []string{"loud"}) {
		t.Errorf("progress identities %v, want the one with a status_callback", got)
	}
}
