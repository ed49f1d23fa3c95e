package twilio_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
)

// The client against the simulator's Twilio API: the two were written to
// the same documentation, and each code class must come out the same.
func simClient(t *testing.T, set func(*sim.Config)) (*twilio.Client, *sim.Sim) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Now = func() time.Time { return now }
	cfg.StatusDelay = time.Hour
	if set != nil {
		set(&cfg)
	}
	s := sim.New(cfg)
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	// A fresh connection per call: a dropped answer is never replayed by
	// the transport.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return twilio.New(config(srv.URL, hc)), s
}

func TestClientAgainstTheSimulator(t *testing.T) {
	c, s := simClient(t, nil)
	m := textMessage()
	res := c.Send(context.Background(), m)
	if res.Class != retry.Accepted || res.HTTPStatus != 201 || len(res.ProviderID) != 34 {
		t.Fatalf("send: %+v", res)
	}
	ds := s.Deliveries()
	if len(ds) != 1 || ds[0].ID != res.ProviderID || ds[0].Ref != m.ID || ds[0].Channel != "sms" {
		t.Fatalf("deliveries %+v", ds)
	}
	status, lres := c.Lookup(context.Background(), res.ProviderID)
	if status != "sent" || lres.Class != retry.Accepted {
		t.Errorf("lookup: %q %+v", status, lres)
	}
	if _, lres := c.Lookup(context.Background(), "SM00000000000000000000000000000000"); lres.Class != retry.Permanent || lres.Code != "20404" {
		t.Errorf("lookup of an unknown sid: %+v", lres)
	}
	found, fres := c.Find(context.Background(), m, now)
	if len(found) != 1 || found[0].ID != res.ProviderID || found[0].Status != "sent" || fres.Class != retry.Accepted {
		t.Errorf("find: %+v %+v", found, fres)
	}
	// The same text again: two candidates, both returned, newest first
	// as Twilio lists them.
	twin := c.Send(context.Background(), m)
	if found, _ := c.Find(context.Background(), m, now); len(found) != 2 || found[0].ID != twin.ProviderID || found[1].ID != res.ProviderID {
		t.Errorf("find with a twin: %+v, want %s and %s", found, res.ProviderID, twin.ProviderID)
	}
}

func TestClientClassifiesTheSimulatorsFaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		set        func(*sim.Config)
		class      retry.Class
		code       string
		retryAfter time.Duration
		delivered  int
	}{
		{"429", func(c *sim.Config) { c.Fault429 = 1 }, retry.RateLimited, "20429", time.Second, 0},
		{"5xx is ambiguous: Twilio may have sent", func(c *sim.Config) { c.Fault5xx = 1 }, retry.Ambiguous, "20500", 0, 0},
		{"permanent", func(c *sim.Config) { c.FaultPermanent = 1 }, retry.Permanent, "21614", 0, 0},
		{"drop after accept", func(c *sim.Config) { c.FaultDrop = 1 }, retry.Ambiguous, "", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := simClient(t, tc.set)
			res := c.Send(context.Background(), textMessage())
			if res.Class != tc.class || res.Code != tc.code || res.RetryAfter != tc.retryAfter {
				t.Errorf("result %+v, want %s %q %v", res, tc.class, tc.code, tc.retryAfter)
			}
			if n := s.DeliveryCount(); n != tc.delivered {
				t.Errorf("%d deliveries, want %d", n, tc.delivered)
			}
		})
	}
	t.Run("slow answer past the deadline", func(t *testing.T) {
		c, s := simClient(t, func(c *sim.Config) { c.FaultSlow = 1; c.SlowDelay = time.Hour })
		// Give up once the simulator has the call (not after a fixed
		// time: on a busy machine the request could still be unwritten).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for s.DeliveryCount() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		if res := c.Send(ctx, textMessage()); res.Class != retry.Ambiguous {
			t.Errorf("result %+v", res)
		}
		if s.DeliveryCount() != 1 {
			t.Error("the slow send was not recorded")
		}
	})
	t.Run("refused credentials pause the identity", func(t *testing.T) {
		_, s := simClient(t, nil)
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		cfg := config(srv.URL, srv.Client())
		cfg.AuthToken = ""
		if res := twilio.New(cfg).Send(context.Background(), textMessage()); res.Class != retry.Identity || res.Code != "20003" {
			t.Errorf("result %+v", res)
		}
	})
}

func TestClientSeesTheSimulatorsOptOut(t *testing.T) {
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer rc.Close()
	c, s := simClient(t, func(cfg *sim.Config) {
		cfg.TwilioAuthToken = authToken
		cfg.TwilioInboundURL = rc.URL + "/webhooks/twilio"
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/sim/twilio/inbound", "application/json",
		stringsReader(`{"from":"`+recipient+`","to":"`+sender+`","body":"STOP"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("inject: %v %v", err, resp)
	}
	resp.Body.Close()
	res := c.Send(context.Background(), textMessage())
	if res.Class != retry.Permanent || !twilio.OptedOut(res.Code) {
		t.Errorf("send to an opted-out recipient: %+v", res)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
