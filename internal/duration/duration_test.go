package duration_test

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/duration"
)

func TestParseReadsDaysAndGoDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "1.5h": 90 * time.Minute, "90d": 90 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "-1d2h": -26 * time.Hour, "0": 0,
	} {
		if got, err := duration.Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1x", "d", "--1d", "1d-2h", "-+1d", "999999999999d"} {
		if got, err := duration.Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, accepted", in, got)
		}
	}
	if _, err := duration.ParseAge("-1h"); err == nil || err.Error() != "must not be negative" {
		t.Errorf("ParseAge(-1h): %v, want must not be negative", err)
	}
}

func TestHumanRoundsForPeople(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Minute: "5m", 2 * time.Hour: "2h", 12*time.Second + 400*time.Millisecond: "12s",
		1234567 * time.Microsecond: "1.235s", 262 * time.Millisecond: "262ms", 90 * time.Minute: "1h30m",
	} {
		if got := duration.Human(d); got != want {
			t.Errorf("Human(%v) = %q, want %q", d, got, want)
		}
	}
}
