package queue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
)

// TestASpecsChannelDefaultsToItsIdentitys: the channel a row gets, from
// the identity when --channel is not given.
func TestASpecsChannelDefaultsToItsIdentitys(t *testing.T) {
	t.Parallel()
	ids, err := identities.Parse(map[string]identities.Config{
		"shop":  {Provider: "whatsapp", Settings: map[string]any{"phone_number_id": "1", "token_env": "T"}},
		"texts": {Provider: "sim", Channel: "sms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ identity, channel, want string }{
		{"shop", "", "whatsapp"}, {"texts", "", "sms"}, {"sim", "", "whatsapp"}, {"sim", "sms", "sms"},
		{"shop", "sms", "channel: identity shop (provider whatsapp) does not send on sms (it sends on whatsapp)"},
		{"shpo", "", `identity: "shpo" is not configured (known: shop, sim, texts)`},
		{"shop", "fax", `channel: must be whatsapp, sms or email (got "fax")`},
	} {
		s := Spec{Key: "k", To: "+15551234567", Text: "hi", Identity: tc.identity, Channel: tc.channel}
		p, err := s.Admit(time.Now(), Defaults{Tenant: "default", Identities: ids})
		got := p.Channel
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("identity %s, channel %q: %s, want %s", tc.identity, tc.channel, got, tc.want)
		}
	}
}

func testIdentities(t *testing.T) map[string]*identities.Identity {
	t.Helper()
	ids, err := identities.Parse(map[string]identities.Config{
		"texts": {Provider: "sim", Channel: "sms", MaxSegments: 1, QuietHours: "21:00-08:00", QuietZone: "UTC"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestAdmitRefusesBadInputNamingTheField: each refusal is an
// *store.InvalidError naming the field a user must fix, in the order a
// user reads their input (the key first).
func TestAdmitRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	ids := testIdentities(t)
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string
	}{
		{"no key", Spec{To: "+15551234567", Text: "hi"}, "key"},
		{"bad key", Spec{Key: "a b", To: "+15551234567", Text: "hi"}, "key"},
		{"bad key before bad text", Spec{Key: "a b", To: "+15551234567", Text: "\xff"}, "key"},
		{"invalid utf-8", Spec{Key: "k", To: "+15551234567", Text: "a\xffb"}, "text"},
		{"no to", Spec{Key: "k", Text: "hi"}, "to"},
		{"text and template", Spec{Key: "k", To: "+15551234567", Text: "hi", Template: "t"}, "text"},
		{"nothing to send", Spec{Key: "k", To: "+15551234567"}, "payload"},
		{"two segments", Spec{Key: "k", To: "+15551234567", Identity: "texts", Text: strings.Repeat("x", 161)}, "text"},
		{"subject off email", Spec{Key: "k", To: "+15551234567", Text: "hi", Subject: "s"}, "subject"},
		{"both deadlines", Spec{Key: "k", To: "+15551234567", Text: "hi", ExpiresIn: "1h", ExpiresAt: "2027-01-01T00:00:00Z"}, "expires_in"},
		{"past deadline", Spec{Key: "k", To: "+15551234567", Text: "hi", ExpiresAt: "2026-12-08T11:00:00Z"}, "expires_at"},
		{"bad lane", Spec{Key: "k", To: "+15551234567", Text: "hi", Lane: "fast"}, "lane"},
		{"bad quiet hours", Spec{Key: "k", To: "+15551234567", Text: "hi", QuietHours: "soon"}, "quiet_hours"},
	} {
		_, err := tc.spec.Admit(now, Defaults{Tenant: "default", Identity: "sim", Identities: ids})
		var ie *store.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: %v, want an invalid %s", tc.name, err, tc.field)
		}
	}
}

// TestAdmitNormalisesAndSchedules: what a valid send becomes: the number
// in E.164 from a national one and its region, the identity's channel, the
// defaults, and a send due in its identity's quiet window held to the
// window's end.
func TestAdmitNormalisesAndSchedules(t *testing.T) {
	t.Parallel()
	ids := testIdentities(t)
	night := time.Date(2026, 12, 8, 23, 0, 0, 0, time.UTC)
	s := Spec{Key: "k", To: "(555) 123-4567", Region: "US", Identity: "texts", Text: "hi"}
	p, err := s.Admit(night, Defaults{Tenant: "default", Identities: ids})
	if err != nil {
		t.Fatal(err)
	}
	if p.To != "+15551234567" || p.Channel != "sms" || p.Tenant != "default" || p.Lane != store.LaneBulk {
		t.Errorf("admitted %+v", p)
	}
	if want := time.Date(2026, 12, 9, 8, 0, 0, 0, time.UTC); !p.NotBefore.Equal(want) {
		t.Errorf("not before %v, want the quiet window's end %v", p.NotBefore, want)
	}
	s.QuietHours = "off"
	if p, err = s.Admit(night, Defaults{Tenant: "default", Identities: ids}); err != nil || !p.NotBefore.IsZero() {
		t.Errorf("quiet_hours off: not before %v, %v; want now", p.NotBefore, err)
	}
	if p.BodyHash() == "" {
		t.Error("no body hash")
	}
}

// TestChallengeNeedsStepsAndADeadline: a spec that asks for a challenge is
// refused without steps or without a deadline, before anything else.
func TestChallengeNeedsStepsAndADeadline(t *testing.T) {
	t.Parallel()
	ids := testIdentities(t)
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	step := Step{Identity: "texts", To: "+15551234567", Text: "code 2", After: "2m"}
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no steps", Spec{Key: "k", To: "+15551234567", Text: "code", Supersedes: "k0", ExpiresIn: "10m"}, "need \"steps\""},
		{"no deadline", Spec{Key: "k", To: "+15551234567", Text: "code", Steps: []Step{step}}, "needs a deadline"},
		{"bad after", Spec{Key: "k", To: "+15551234567", Text: "code", ExpiresIn: "10m", Steps: []Step{{Identity: "texts", To: "+15551234567", Text: "x", After: "soon"}}}, "step 2"},
	} {
		if !tc.spec.IsChallenge() {
			t.Fatalf("%s: not a challenge", tc.name)
		}
		_, err := tc.spec.Challenge(now, Defaults{Tenant: "default", Identity: "sim", Identities: ids})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	ok := Spec{Key: "k", To: "+15551234567", Text: "code", ExpiresIn: "10m", Steps: []Step{step}}
	cp, err := ok.Challenge(now, Defaults{Tenant: "default", Identity: "sim", Identities: ids})
	if err != nil || len(cp.Steps) != 2 || cp.Steps[1].After != 2*time.Minute || cp.Steps[1].Channel != "sms" {
		t.Errorf("challenge %+v, %v", cp, err)
	}
}
