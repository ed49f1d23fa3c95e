package cli

import (
	"testing"
	"time"
)

func TestParseAgeReadsGoDurationsAndDays(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "90d", want: 90 * day},
		{in: "1d12h", want: day + 12*time.Hour},
		{in: "0d", want: 0},
		{in: "0s", want: 0},
		{in: "36h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "", err: "want a duration like 90d, 36h or 30m"},
		{in: "90", err: "want a duration like 90d, 36h or 30m"},
		{in: "d", err: "want a duration like 90d, 36h or 30m"},
		{in: "1.5d", err: "want a duration like 90d, 36h or 30m"},
		{in: "+1d", err: "want a duration like 90d, 36h or 30m"},
		{in: "1d1d", err: "want a duration like 90d, 36h or 30m"},
		{in: "1dd", err: "want a duration like 90d, 36h or 30m"},
		{in: "-1d", err: "must not be negative"},
		{in: "-5m", err: "must not be negative"},
		{in: "1d-1h", err: "must not be negative"},
		{in: "106751d", want: 106751 * day},
		{in: "106752d", err: "want a duration like 90d, 36h or 30m"},
		{in: "106751d23h59m", err: "too long"},
	} {
		got, err := parseAge(c.in)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("parseAge(%q) = %v, %v; want error %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseAge(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
