package cli_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// quietConfig is a WhatsApp identity through the simulator at base with
// quiet hours 21:00-08:00 (Europe/Berlin) and the reply lane and the otp
// purpose exempt.
func quietConfig(base string) string {
	return fmt.Sprintf(`default_identity: shop
identities:
  shop:
    provider: whatsapp
    base_url: %s
    phone_number_id: "1000001"
    token_env: MSGQ_TEST_TOKEN
    quiet_hours: "21:00-08:00"
    quiet_zone: Europe/Berlin
    quiet_exempt: {lanes: [reply], purposes: [otp]}
`, base)
}

// at is e with its processes' clocks shifted so that they read t now
// (MSGQ_TEST_CLOCK_OFFSET; on SQLite that is the store's clock too).
func (e *opEnv) at(t time.Time) *opEnv {
	off := time.Until(t).Round(time.Millisecond)
	return &opEnv{msgqEnv: &msgqEnv{t: e.t, env: append(append([]string{}, e.env...), "MSGQ_TEST_CLOCK_OFFSET="+off.String())}, st: e.st}
}

// TestQuietHoursHoldABulkSendUntilMorningAndLetExemptOnesGo: at 22:00 in
// Berlin a bulk send to a German number is enqueued due at 08:00 (the
// window's end), and no drain sends it before; a send in the reply lane,
// one of purpose otp and one with --quiet-hours off (or "quiet_hours":
// "off" in send --file) go at once. A send
// whose deadline falls inside the window is refused (exit 2, nothing
// written). On SQLite, whose clock is the host's, the same drain run at
// 07:59 sends nothing and at 08:00 sends the held row: the simulator's
// delivery log is the oracle.
func TestQuietHoursHoldABulkSendUntilMorningAndLetExemptOnesGo(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	y, m, d := time.Now().In(berlin).Date()
	evening := time.Date(y, m, d, 22, 0, 0, 0, berlin)
	morning := time.Date(y, m, d+1, 8, 0, 0, 0, berlin)
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t)
		e := newOpEnv(t, kind, quietConfig(sim))
		late := e.at(evening)
		send := func(key, to string, extra ...string) {
			late.run(append([]string{"send", "--key", key, "--to", to, "--template", "order_update", "--param", key}, extra...)...)
		}
		send("bulk-1", "+4930123456")
		send("reply-1", "+4930123457", "--lane", "reply")
		send("otp-1", "+4930123458", "--purpose", "otp")
		send("off-1", "+4930123459", "--quiet-hours", "off")
		in := filepath.Join(t.TempDir(), "in.jsonl")
		writeFile(t, in, `{"key":"file-1","to":"+4930123461","template":"order_update","quiet_hours":"off"}`+"\n"+
			`{"key":"file-2","to":"+4930123462","template":"order_update"}`+"\n")
		late.run("send", "--file", in)
		if got := e.get("file-2").NextAttemptAt; !got.Equal(morning) {
			t.Errorf("file-2 due %s, want %s (08:00 Berlin)", got.In(berlin), morning)
		}
		if got := e.get("bulk-1").NextAttemptAt; !got.Equal(morning) {
			t.Errorf("bulk row due %s, want %s (08:00 Berlin)", got.In(berlin), morning)
		}
		late.refused(2, `^msgq: quiet_hours: the message expires at .*, inside the recipient's quiet hours 21:00-08:00 \(Europe/Berlin\).*could never go out`,
			"send", "--key", "otp-2", "--to", "+4930123460", "--text", "123456", "--expires-in", "10m")
		late.refused(2, `^msgq: quiet_hours: quiet hours "9-5": start: "9" is not HH:MM \(or off\)\n$`, "send", "--key", "x-1", "--to", "+4930123460", "--text", "hi", "--quiet-hours", "9-5")
		if _, _, code := e.try("show", "otp-2"); code == 0 {
			t.Errorf("the refused send was written")
		}
		if _, errs, code := late.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		got := map[string]int{}
		for _, dl := range deliveries(t, sim) {
			got[dl.To]++
		}
		if len(got) != 4 || got["+4930123457"] != 1 || got["+4930123458"] != 1 || got["+4930123459"] != 1 || got["+4930123461"] != 1 {
			t.Errorf("at 22:00 deliveries %v, want the exempt and override rows once each", got)
		}
		if b := e.get("bulk-1"); b.State != state.Queued || b.Attempts != 0 {
			t.Errorf("bulk row %s with %d attempts, want queued untouched", b.State, b.Attempts)
		}
		if kind != "sqlite" {
			// PostgreSQL decides on the server's clock, which a test
			// cannot move: the morning is SQLite's part.
			return
		}
		if _, errs, code := e.at(morning.Add(-time.Minute)).try("drain"); code != 0 || len(deliveries(t, sim)) != 4 {
			t.Fatalf("drain at 07:59: exit %d, %d deliveries: %s", code, len(deliveries(t, sim)), errs)
		}
		if _, errs, code := e.at(morning.Add(30 * time.Second)).try("drain"); code != 0 {
			t.Fatalf("drain at 08:00: exit %d: %s", code, errs)
		}
		var bulk []delivery
		for _, dl := range deliveries(t, sim) {
			if dl.To == "+4930123456" || dl.To == "+4930123462" {
				bulk = append(bulk, dl)
			}
		}
		if len(bulk) != 2 || e.get("bulk-1").State != state.Sent || e.get("file-2").State != state.Sent {
			t.Errorf("at 08:00: bulk deliveries %+v, row %s; want one each, sent", bulk, e.get("bulk-1").State)
		}
	})
}

// TestQuietHoursSettingsAreCheckedAtLoad: a window without a zone, a bad
// window, zone or lane is bad input naming the identity.
func TestQuietHoursSettingsAreCheckedAtLoad(t *testing.T) {
	t.Parallel()
	e := newOpEnv(t, "sqlite", simOnly)
	for yaml, want := range map[string]string{
		`quiet_hours: "21:00-08:00"`:                                                        `quiet_hours needs quiet_zone`,
		"quiet_hours: \"21-08\"\n    quiet_zone: UTC":                                       `quiet_hours: quiet hours "21-08"`,
		"quiet_hours: \"21:00-08:00\"\n    quiet_zone: Mars/Olympus":                        `quiet_zone "Mars/Olympus" is not an IANA time zone`,
		"quiet_hours: \"21:00-08:00\"\n    quiet_zone: UTC\n    quiet_exempt: {lanes: [x]}": `quiet_exempt.lanes: "x" is not a lane`,
		`quiet_zone: UTC`: `quiet_zone and quiet_exempt need quiet_hours`,
	} {
		cfg := filepath.Join(t.TempDir(), "bad.yaml")
		body := "identities:\n  q:\n    provider: sim\n    " + yaml + "\n"
		writeFile(t, cfg, body)
		e.refused(2, `^msgq: config: identity q: .*`+regexp.QuoteMeta(want), "identities", "--config", cfg)
	}
}

// TestQuietHoursHoldAnEmailUntilMorningAndLetExemptOnesGo is the email
// path of quiet hours: an smtp identity with quiet_hours 21:00-08:00 in
// its quiet_zone (email has no country to take a zone from), a real drain
// against the simulator's SMTP server. At 22:00 in Berlin a bulk mail is
// enqueued due at 08:00 and the drain neither claims it (no attempt) nor
// sends it; one in the reply lane, one of purpose otp and one with
// --quiet-hours off go at once. On SQLite, whose clock is the host's, a
// drain at 07:59 sends nothing more and one at 08:00 sends the held mail,
// once: the simulator's delivery log is the oracle.
func TestQuietHoursHoldAnEmailUntilMorningAndLetExemptOnesGo(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	y, m, d := time.Now().In(berlin).Date()
	evening := time.Date(y, m, d, 22, 0, 0, 0, berlin)
	morning := time.Date(y, m, d+1, 8, 0, 0, 0, berlin)
	bothStores(t, func(t *testing.T, kind string) {
		base, port := serveSimSMTP(t)
		e := newOpEnv(t, kind, fmt.Sprintf(`identities:
  mail:
    provider: smtp
    host: 127.0.0.1
    port: %s
    from: "Shop <news@example.com>"
    tls: none
    quiet_hours: "21:00-08:00"
    quiet_zone: Europe/Berlin
    quiet_exempt: {lanes: [reply], purposes: [otp]}
`, port))
		late := e.at(evening)
		send := func(key, to string, extra ...string) {
			late.run(append([]string{"send", "--key", key, "--identity", "mail", "--to", to, "--subject", "News " + key, "--text", "Hello " + key}, extra...)...)
		}
		send("bulk-1", "ada@example.com")
		send("reply-1", "bob@example.com", "--lane", "reply")
		send("otp-1", "cy@example.com", "--purpose", "otp")
		send("off-1", "di@example.com", "--quiet-hours", "off")
		if got := e.get("bulk-1").NextAttemptAt; !got.Equal(morning) {
			t.Errorf("bulk mail due %s, want %s (08:00 Berlin)", got.In(berlin), morning)
		}
		if _, errs, code := late.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		got := deliveredTo(t, base)
		if len(got) != 3 || got["bob@example.com"] != 1 || got["cy@example.com"] != 1 || got["di@example.com"] != 1 {
			t.Errorf("at 22:00 deliveries %v, want the reply, otp and override mails once each", got)
		}
		if b := e.get("bulk-1"); b.State != state.Queued || b.Attempts != 0 {
			t.Errorf("bulk mail %s with %d attempts, want queued and never claimed", b.State, b.Attempts)
		}
		for _, key := range []string{"reply-1", "otp-1", "off-1"} {
			if r := e.get(key); r.State != state.Sent {
				t.Errorf("%s: %s, want sent", key, r.State)
			}
		}
		if kind != "sqlite" {
			// PostgreSQL decides on the server's clock, which a test
			// cannot move: the morning is SQLite's part.
			return
		}
		if _, errs, code := e.at(morning.Add(-time.Minute)).try("drain"); code != 0 || len(deliveries(t, base)) != 3 {
			t.Fatalf("drain at 07:59: exit %d, %d deliveries: %s", code, len(deliveries(t, base)), errs)
		}
		if b := e.get("bulk-1"); b.State != state.Queued || b.Attempts != 0 {
			t.Errorf("at 07:59 the bulk mail is %s with %d attempts, want queued and never claimed", b.State, b.Attempts)
		}
		if _, errs, code := e.at(morning.Add(30 * time.Second)).try("drain"); code != 0 {
			t.Fatalf("drain at 08:00: exit %d: %s", code, errs)
		}
		got = deliveredTo(t, base)
		if len(got) != 4 || got["ada@example.com"] != 1 || e.get("bulk-1").State != state.Sent {
			t.Errorf("at 08:00 deliveries %v, bulk mail %s; want it delivered once, sent", got, e.get("bulk-1").State)
		}
	})
}

// TestQuietHoursOnTheSMSPathTakeTheZoneFromTheNumber: a Twilio identity
// with quiet hours 21:00-08:00 and quiet_zone America/Los_Angeles, a real
// drain against the simulator's Twilio API. At 22:00 in Berlin (13:00 in
// Los Angeles, 16:00 in New York) an SMS to a Berlin number is held until
// 08:00 Berlin, the zone its number says, not the identity's; one to a New
// York number and one to a toll-free number (every US zone: the
// identity's zone decides) go at once, as does an otp to Berlin. On
// SQLite (whose clock the test moves) the held SMS goes out once at 08:00
// Berlin; on PostgreSQL the enqueue's schedule and the exempt send are
// checked.
func TestQuietHoursOnTheSMSPathTakeTheZoneFromTheNumber(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	y, m, d := time.Now().In(berlin).Date()
	evening := time.Date(y, m, d, 22, 0, 0, 0, berlin)
	morning := time.Date(y, m, d+1, 8, 0, 0, 0, berlin)
	bothStores(t, func(t *testing.T, kind string) {
		base := serveSim(t)
		e := newOpEnv(t, kind, fmt.Sprintf(`identities:
  sms:
    provider: twilio
    base_url: %s
    account_sid_env: MSGQ_TEST_TWILIO_SID
    auth_token_env: MSGQ_TEST_TWILIO_TOKEN
    from: "+15005550006"
    quiet_hours: "21:00-08:00"
    quiet_zone: America/Los_Angeles
    quiet_exempt: {purposes: [otp]}
`, base))
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN=test-token")
		late := e.at(evening)
		send := func(key, to string, extra ...string) {
			late.run(append([]string{"send", "--key", key, "--identity", "sms", "--to", to, "--text", "Hello " + key}, extra...)...)
		}
		send("de-1", "+4930123456")
		send("ny-1", "+12125551234")
		send("tf-1", "+18002752273")
		send("otp-de", "+4930123457", "--purpose", "otp")
		if got := e.get("de-1").NextAttemptAt; !got.Equal(morning) {
			t.Errorf("the Berlin SMS is due %s, want %s (08:00 Berlin)", got.In(berlin), morning)
		}
		if _, errs, code := late.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		got := deliveredTo(t, base)
		if r := e.get("de-1"); r.State != state.Queued || r.Attempts != 0 || got["+4930123456"] != 0 {
			t.Errorf("the Berlin SMS: %s with %d attempts, %d deliveries; want queued and never claimed", r.State, r.Attempts, got["+4930123456"])
		}
		if got["+4930123457"] != 1 {
			t.Errorf("the otp to Berlin: %d deliveries, want 1", got["+4930123457"])
		}
		if kind != "sqlite" {
			// PostgreSQL's drain checks quiet hours again on the server's
			// clock, which a test cannot move: whether New York and Los
			// Angeles are asleep right now is the real time of day, and
			// the morning is SQLite's part.
			return
		}
		if len(got) != 3 || got["+12125551234"] != 1 || got["+18002752273"] != 1 {
			t.Errorf("at 22:00 Berlin deliveries %v, want New York, toll-free and the otp once each", got)
		}
		if _, errs, code := e.at(morning.Add(30 * time.Second)).try("drain"); code != 0 {
			t.Fatalf("drain at 08:00: exit %d: %s", code, errs)
		}
		if got := deliveredTo(t, base); len(got) != 4 || got["+4930123456"] != 1 || e.get("de-1").State != state.Sent {
			t.Errorf("at 08:00 Berlin deliveries %v, de-1 %s; want it delivered once, sent", got, e.get("de-1").State)
		}
	})
}
