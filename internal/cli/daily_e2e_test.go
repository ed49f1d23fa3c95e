package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestTwoDrainsRacingKeepTheDailyRecipientLimit: 60 rows to 20
// recipients, an identity whose daily_recipients is 5, and two drain
// processes started together. The simulator's delivery log is the
// oracle: exactly 5 recipients are reached, each with all 3 of its rows
// (recipients already messaged go on), and the other 45 rows stay queued,
// never claimed, their last error saying why. msgq identities shows 5/5,
// health --max-daily-recipients-share 0.9 exits 4 and 1 exits 0. Pacing is
// off, so nothing but the limit's own lock serialises the claims.
func TestTwoDrainsRacingKeepTheDailyRecipientLimit(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t)
		e := newOpEnv(t, kind, fmt.Sprintf(`default_identity: shop
identities:
  shop:
    provider: whatsapp
    base_url: %s
    phone_number_id: "1000001"
    token_env: MSGQ_TEST_TOKEN
    rate: "off"
    per_recipient_interval: "off"
    daily_recipients: 5
`, sim))
		const recipients, perRecipient, limit = 20, 3, 5
		var lines strings.Builder
		for i := range recipients * perRecipient {
			fmt.Fprintf(&lines, `{"key":"d-%03d","to":"+1555%07d","template":"order_update"}`+"\n", i, i%recipients)
		}
		in := filepath.Join(t.TempDir(), "in.jsonl")
		writeFile(t, in, lines.String())
		e.run("send", "--file", in)

		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, errs, code := e.try("drain", "--concurrency", "4"); code != 0 {
					t.Errorf("drain %d: exit %d: %s", i, code, errs)
				}
			}()
		}
		close(start)
		wg.Wait()

		perRcpt := map[string]int{}
		for _, d := range deliveries(t, sim) {
			perRcpt[d.To]++
		}
		if len(perRcpt) != limit {
			t.Errorf("%d recipients reached, want the limit %d: %v", len(perRcpt), limit, perRcpt)
		}
		for to, n := range perRcpt {
			if n != perRecipient {
				t.Errorf("%s got %d messages, want all %d of its rows", to, n, perRecipient)
			}
		}
		held := 0
		for i := range recipients * perRecipient {
			m := e.get(fmt.Sprintf("d-%03d", i))
			switch {
			case m.State == state.Sent && perRcpt[m.To] > 0:
			case m.State == state.Queued && perRcpt[m.To] == 0 && m.Attempts == 0 && strings.HasPrefix(m.LastError, store.DailyHeldError):
				held++
			default:
				t.Errorf("%s to %s: %s, %d attempts, last_error %q", m.Key, m.To, m.State, m.Attempts, m.LastError)
			}
		}
		if want := (recipients - limit) * perRecipient; held != want {
			t.Errorf("%d rows held, want %d", held, want)
		}

		var ids []struct {
			Name  string
			Used  int `json:"daily_recipients_used"`
			Limit int `json:"daily_recipients_limit"`
		}
		if err := json.Unmarshal([]byte(e.run("identities", "-o", "json")), &ids); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if id.Name == "shop" && (id.Used != limit || id.Limit != limit) {
				t.Errorf("identities: shop used %d of %d, want %d of %d", id.Used, id.Limit, limit, limit)
			}
		}
		if out := e.run("identities"); !regexp.MustCompile(`(?m)^shop +whatsapp +whatsapp +off +off +5/5 +45 +0 +0 +no +yes `).MatchString(out) {
			t.Errorf("identities table has no 5/5:\n%s", out)
		}
		_, errs, code := e.try("health", "--max-daily-recipients-share", "0.9")
		if code != 4 || !strings.Contains(errs, "health: identity shop has used 5 of its 5 daily unique recipients (100.0%, max 90.0%)") {
			t.Errorf("health at 0.9: exit %d, stderr %q; want 4 naming shop", code, errs)
		}
		if _, errs, code := e.try("health", "--max-daily-recipients-share", "1"); code != 0 {
			t.Errorf("health at 1: exit %d: %s", code, errs)
		}
		e.refused(2, `^msgq: --max-daily-recipients-share \(health.max_daily_recipients_share\) "90%": want a share from 0 to 1`,
			"health", "--max-daily-recipients-share", "90%")

		// A new row to a recipient already messaged still goes.
		var known string
		for to := range perRcpt {
			known = to
		}
		e.run("send", "--key", "again-1", "--to", known, "--template", "order_update")
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		if m := e.get("again-1"); m.State != state.Sent {
			t.Errorf("a row to a recipient messaged today: %s (%q), want sent", m.State, m.LastError)
		}
	})
}

// TestDailyRecipientsMustBeACount: a negative limit is bad input.
func TestDailyRecipientsMustBeACount(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, "sqlite", simOnly)
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfg, "identities:\n  q: {provider: sim, daily_recipients: -1}\n")
	e.refused(2, `^msgq: config: identity q: daily_recipients -1 must be a positive number`, "identities", "--config", cfg)
}
