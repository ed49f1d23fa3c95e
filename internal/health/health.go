// Package health is msgq's alerting policy: which thresholds an operator
// set on the queue's vital signs (Parse, from flags, environment or config
// as the CLI resolved them), and which of them the store's figures cross
// (Evaluate). The CLI reads the store and prints; the decisions are here.
package health

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// SettingError is a threshold or window setting msgq refuses (bad input:
// nothing was read or written).
type SettingError struct{ msg string }

func (e *SettingError) Error() string { return e.msg }

func settingf(format string, a ...any) error { return &SettingError{fmt.Sprintf(format, a...)} }

// Settings are the thresholds as the user wrote them (flag, environment
// or the config file's health: section, resolved by the CLI, in
// internal/cli/config.go); "" is not set.
type Settings struct {
	MaxOldestQueued     string
	MaxStuck            string
	MaxUnknown          string
	MaxSendingPastLease string
	// Vitals are the thresholds on the vital signs, by config key
	// (the package's Vitals); Window and NoProgressAfter the
	// spans they are measured over.
	Vitals                  map[string]string
	Window, NoProgressAfter string
	MaxClockOffset          string
	// MaxDailyShare is the share of an identity's daily unique-recipient
	// limit that may be used (DailyShareName; the CLI measures it, in
	// internal/cli/health_daily.go).
	MaxDailyShare string
}

// Threshold is one parsed limit: a count, or an age in nanoseconds.
type Threshold struct {
	Name  string // the config key, also the check's name in JSON
	Flag  string
	IsAge bool
	// IsShare: Max (and the value) are a share of a limit in thousandths.
	IsShare bool
	Max     int64
}

// Vital is one threshold on a vital sign: its config key (also its flag,
// with dashes), what it limits, and whether that is an age.
type Vital struct {
	Name, Help string
	IsAge      bool
}

// IsVital reports whether t is one of Vitals (measured over a window).
func (t Threshold) IsVital() bool {
	for _, v := range Vitals {
		if v.Name == t.Name {
			return true
		}
	}
	return false
}

// Parse reads the settings; at least one threshold must be given.
func Parse(h Settings) ([]Threshold, error) {
	var out []Threshold
	all := []struct {
		name, flag, v string
		isAge         bool
	}{
		{"max_oldest_queued", "max-oldest-queued", h.MaxOldestQueued, true},
		{"max_stuck", "max-stuck", h.MaxStuck, false},
		{"max_unknown", "max-unknown", h.MaxUnknown, false},
		{"max_sending_past_lease", "max-sending-past-lease", h.MaxSendingPastLease, false},
		{"max_clock_offset", "max-clock-offset", h.MaxClockOffset, true},
	}
	for _, t := range Vitals {
		all = append(all, struct {
			name, flag, v string
			isAge         bool
		}{t.Name, strings.ReplaceAll(t.Name, "_", "-"), h.Vitals[t.Name], t.IsAge})
	}
	for _, s := range all {
		if s.v == "" {
			continue
		}
		t := Threshold{Name: s.name, Flag: s.flag, IsAge: s.isAge}
		if s.isAge {
			d, err := duration.ParseAge(s.v)
			if err != nil {
				return nil, settingf("--%s (health.%s) %q: %v", s.flag, s.name, s.v, err)
			}
			t.Max = int64(d)
		} else {
			n, err := strconv.ParseInt(s.v, 10, 64)
			if err != nil || n < 0 {
				return nil, settingf("--%s (health.%s) %q: want a count of 0 or more", s.flag, s.name, s.v)
			}
			t.Max = n
		}
		out = append(out, t)
	}
	if h.MaxDailyShare != "" {
		t, err := dailyShareThreshold(h.MaxDailyShare)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, settingf("no thresholds: give at least one of --max-oldest-queued, --max-stuck, --max-unknown, " +
			"--max-sending-past-lease, --max-clock-offset or another --max-* flag of msgq health --help (or set them in the config file's health: section)")
	}
	return out, nil
}

// DailyShareName is the health check of the daily unique-recipient limit.
const DailyShareName = "max_daily_recipients_share"

// dailyShareThreshold parses --max-daily-recipients-share: a share of the
// limit, kept in thousandths (the check's value and max in JSON).
func dailyShareThreshold(v string) (Threshold, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return Threshold{}, settingf("--max-daily-recipients-share (health.%s) %q: want a share from 0 to 1, e.g. 0.9", DailyShareName, v)
	}
	return Threshold{Name: DailyShareName, Flag: "max-daily-recipients-share", IsShare: true, Max: int64(f*1000 + 0.5)}, nil
}

// Windows are health's --window and --no-progress-after, parsed
// (empty: the defaults).
func Windows(h Settings) (window, noProgress time.Duration, err error) {
	window, noProgress = store.DefaultStatsWindow, store.DefaultNoProgressAfter
	for _, f := range []struct {
		flag, key, v string
		dst          *time.Duration
	}{{"window", "window", h.Window, &window}, {"no-progress-after", "no_progress_after", h.NoProgressAfter, &noProgress}} {
		if f.v == "" {
			continue
		}
		d, err := duration.ParseAge(f.v)
		if err != nil || d <= 0 {
			return 0, 0, settingf("--%s (health.%s) %q: want a positive duration like 1h or 1d", f.flag, f.key, f.v)
		}
		*f.dst = d
	}
	return window, noProgress, nil
}

// Unsendable is one identity whose queued rows no drain in this
// environment can send: it is not configured, or its token is not set
// here. Field names are a JSON contract.
type Unsendable struct {
	Identity string `json:"identity"`
	Queued   int    `json:"queued"`
	Why      string `json:"why"`
}

// Check is one Threshold checked. Field names are a JSON contract.
type Check struct {
	Name    string `json:"name"`    // the Threshold, as in the config file (max_stuck)
	Value   int64  `json:"value"`   // a count, or an age in nanoseconds
	Max     int64  `json:"max"`     // the same unit
	Crossed bool   `json:"crossed"` // value > max
	Message string `json:"message"` // for people; empty when not crossed
}

// Result is what `health -o json` prints.
type Result struct {
	OK     bool      `json:"ok"`
	At     time.Time `json:"at"`
	Checks []Check   `json:"checks"`
}

// Vitals are health's thresholds on the vital signs: the config
// key (also the flag, with dashes) and what it limits: a count, or an age
// when isAge.
var Vitals = []Vital{
	{"max_key_conflicts", "key conflicts within --window", false},
	{"max_sending_long", "rows in sending claimed more than 1m ago (lease expired or not)", false},
	{"max_failed_permanent", "rows failed as permanent within --window", false},
	{"max_failed_expired", "rows failed as expired within --window", false},
	{"max_failed_exhausted", "rows failed as exhausted within --window", false},
	{"max_failed_canceled", "rows canceled within --window", false},
	{"max_failed_resolved", "rows resolved as failed within --window", false},
	{"max_resends", "resends made within --window", false},
	{"max_maybe_sent", "rows flagged maybe_sent with no delivered or read status", false},
	{"max_sent_without_progress", "sent rows of one identity (whose webhooks msgq receives) without a status after --no-progress-after, sent within --window", false},
	{"max_unsendable", "queued rows of identities that cannot send from here (not configured, or token not set)", false},
	{"max_challenges_blocked", "open challenges whose fallback is blocked by a step in sending or unknown", false},
	{"max_challenges_expired", "challenges expired (deadline passed, no step completed) within --window", false},
	{"max_challenge_unknown_past_deadline", "challenge steps in unknown past their deadline", false},
	{"max_challenge_first_delivery_p95", "the 95th percentile of challenge creation to first delivery, within --window", true},
	{"max_oldest_intake", "how long the oldest row PostgreSQL's enqueue() took in has waited for its admission (no drain or serve runs with its identity's config)", true},
	{"max_failed_invalid", "rows taken in by enqueue() and failed as invalid at their admission, within --window", false},
}

// vitalCheck measures one of Vitals against s; ok is false for a
// name that is not one of them.
func vitalCheck(name string, limit int64, s *store.Stats, un []Unsendable) (value int64, msg string, ok bool) {
	v := s.VitalStats
	win := duration.Human(s.Window)
	if reason, found := strings.CutPrefix(name, "max_failed_"); found {
		n := int64(v.RecentFailures[reason])
		return n, fmt.Sprintf("%s failed as %s in the last %s (max %d)", nRows(n), reason, win, limit), true
	}
	switch name {
	case "max_oldest_intake":
		age := IntakeAge(s)
		return int64(age), fmt.Sprintf("the oldest row taken in by enqueue() has waited %s for its admission (max %s): is a drain or msgq serve running with its identity's config?",
			duration.Human(age), duration.Human(time.Duration(limit))), true
	case "max_key_conflicts":
		return v.RecentKeyConflicts, fmt.Sprintf("%d key conflict(s) in the last %s: a key was reused with another body (max %d)",
			v.RecentKeyConflicts, win, limit), true
	case "max_sending_long":
		n := int64(v.SendingLong)
		return n, fmt.Sprintf("%s in sending for over %s, each a possible duplicate (max %d)", nRows(n), duration.Human(store.LongSending), limit), true
	case "max_resends":
		n := int64(v.RecentResends)
		return n, fmt.Sprintf("%d resend(s) in the last %s (max %d)", n, win, limit), true
	case "max_maybe_sent":
		n := int64(0)
		for st, c := range v.MaybeSent {
			if st != string(state.Delivered) && st != string(state.Read) {
				n += int64(c)
			}
		}
		return n, fmt.Sprintf("%s flagged maybe_sent with no delivered or read status (max %d)", nRows(n), limit), true
	case "max_sent_without_progress":
		// The worst identity decides; the message names every one over.
		var worst int64
		var over []string
		for _, p := range v.SentProgress {
			worst = max(worst, int64(p.WithoutProgress))
			if int64(p.WithoutProgress) > limit {
				over = append(over, fmt.Sprintf("%s %d of %d", p.Identity, p.WithoutProgress, p.Sent))
			}
		}
		return worst, fmt.Sprintf("sent rows without a delivered or read status after %s (last %s): %s (max %d per identity)",
			duration.Human(v.NoProgressAfter), win, strings.Join(over, ", "), limit), true
	case "max_unsendable":
		var n int64
		var parts []string
		for _, u := range un {
			n += int64(u.Queued)
			parts = append(parts, fmt.Sprintf("%s %d (%s)", u.Identity, u.Queued, u.Why))
		}
		return n, fmt.Sprintf("%s queued for identities that cannot send from here: %s (max %d)", nRows(n), strings.Join(parts, ", "), limit), true
	case "max_challenges_blocked":
		n := int64(v.Challenges.Blocked)
		return n, fmt.Sprintf("%d open challenge(s) with the fallback blocked by a step in sending or unknown (max %d)", n, limit), true
	case "max_challenges_expired":
		n := int64(v.Challenges.RecentExpired)
		return n, fmt.Sprintf("%d challenge(s) expired in the last %s with no step completed (max %d)", n, win, limit), true
	case "max_challenge_unknown_past_deadline":
		n := int64(v.Challenges.UnknownPastDeadline)
		return n, fmt.Sprintf("%d challenge step(s) in unknown past their deadline, each a prompt that may or may not have arrived (max %d)", n, limit), true
	case "max_challenge_first_delivery_p95":
		c := v.Challenges
		return int64(c.FirstDeliveryP95), fmt.Sprintf("challenge creation to first delivery p95 is %s over %d challenge(s) in the last %s (max %s)",
			duration.Human(c.FirstDeliveryP95), c.RecentFirstDeliveries, win, duration.Human(time.Duration(limit))), true
	}
	return 0, "", false
}

// nRows is "1 row" or "N rows".
func nRows(n int64) string {
	if n == 1 {
		return "1 row"
	}
	return strconv.FormatInt(n, 10) + " rows"
}

// Input is what the thresholds are checked against: the store's figures,
// the identities whose queued rows cannot be sent from here, and, for
// DailyShareName, a measure of the daily unique-recipient limits (the
// highest share used, in thousandths, and a message naming its identity).
type Input struct {
	Stats      *store.Stats
	Unsendable []Unsendable
	DailyShare func(max int64) (int64, string, error)
}

// Evaluate checks each threshold against in. Result.OK is false when any
// is crossed (a value above its max); a crossed check's Message says why.
func Evaluate(ts []Threshold, in Input) (Result, error) {
	s := in.Stats
	res := Result{OK: true, At: s.At, Checks: []Check{}}
	for _, t := range ts {
		c := Check{Name: t.Name, Max: t.Max}
		switch t.Name {
		case "max_oldest_queued":
			age := OldestAge(s)
			c.Value = int64(age)
			c.Message = fmt.Sprintf("oldest eligible queued row is %s old (max %s)", duration.Human(age), duration.Human(time.Duration(t.Max)))
		case "max_stuck":
			c.Value = int64(s.SendingPastLease + s.Unknown)
			c.Message = fmt.Sprintf("%s stuck: %d in sending past the lease, %d unknown (max %d)",
				nRows(c.Value), s.SendingPastLease, s.Unknown, t.Max)
		case "max_unknown":
			c.Value = int64(s.Unknown)
			c.Message = fmt.Sprintf("%s in unknown (max %d)", nRows(c.Value), t.Max)
		case "max_sending_past_lease":
			c.Value = int64(s.SendingPastLease)
			c.Message = fmt.Sprintf("%s in sending past the lease (max %d)", nRows(c.Value), t.Max)
		case DailyShareName:
			if in.DailyShare != nil {
				var err error
				if c.Value, c.Message, err = in.DailyShare(t.Max); err != nil {
					return Result{}, err
				}
			}
		case "max_clock_offset":
			c.Value = int64(s.ClockOffset.Abs())
			c.Message = fmt.Sprintf("clock of %s is %+.3fs off the store's clock (max %s)", s.ClockOffsetProcess,
				s.ClockOffset.Seconds(), duration.Human(time.Duration(t.Max)))
		default:
			c.Value, c.Message, _ = vitalCheck(t.Name, t.Max, s, in.Unsendable)
		}
		c.Crossed = c.Value > c.Max
		if !c.Crossed {
			c.Message = ""
		}
		res.OK = res.OK && !c.Crossed
		res.Checks = append(res.Checks, c)
	}
	return res, nil
}

// OldestAge is how long the oldest eligible queued row has been due (zero
// when none is).
func OldestAge(s *store.Stats) time.Duration {
	if s.OldestEligible == nil {
		return 0
	}
	return max(0, s.At.Sub(*s.OldestEligible))
}

// IntakeAge is how long the oldest row waiting in intake has waited
// (zero when none does).
func IntakeAge(s *store.Stats) time.Duration {
	if s.OldestIntake == nil {
		return 0
	}
	return max(0, s.At.Sub(*s.OldestIntake))
}

// Permille writes thousandths as a percentage.
func Permille(v int64) string {
	return strconv.FormatFloat(float64(v)/10, 'f', 1, 64) + "%"
}
