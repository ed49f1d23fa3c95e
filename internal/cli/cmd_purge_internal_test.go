package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/duration"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
		got, err := duration.ParseAge(c.in)
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("duration.ParseAge(%q) = %v, %v; want error %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("duration.ParseAge(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// TestEveryDurationFlagTakesTheOneGrammar pins issue 13: 1d worked for
// health and purge but not for stats --window or stuck --older-than. Every
// duration flag of the tree reads parseDuration's grammar.
func TestEveryDurationFlagTakesTheOneGrammar(t *testing.T) {
	t.Parallel()
	root := newRootCmd(&app{ios: &IOStreams{}, now: time.Now})
	var seen []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() != "duration" {
				return
			}
			seen = append(seen, c.CommandPath()+" --"+f.Name)
			if err := f.Value.Set("1d12h"); err != nil {
				t.Errorf("%s --%s 1d12h: %v", c.CommandPath(), f.Name, err)
			} else if f.Value.String() != (36 * time.Hour).String() {
				t.Errorf("%s --%s 1d12h = %s", c.CommandPath(), f.Name, f.Value.String())
			}
			if err := f.Value.Set("1x"); err == nil || err.Error() != duration.ErrSyntax.Error() {
				t.Errorf("%s --%s 1x: %v, want %q", c.CommandPath(), f.Name, err, duration.ErrSyntax)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for _, want := range []string{"msgq stats --window", "msgq stuck --older-than", "msgq drain --lease"} {
		if !slices.Contains(seen, want) {
			t.Errorf("%s is not among the duration flags %v", want, seen)
		}
	}
}

func TestParseDurationIsSignedAndParseAgeIsNot(t *testing.T) {
	t.Parallel()
	if d, err := duration.Parse("-1d2h"); err != nil || d != -26*time.Hour {
		t.Errorf("duration.Parse(-1d2h) = %v, %v", d, err)
	}
	if _, err := duration.Parse("--1d"); err == nil {
		t.Errorf("duration.Parse(--1d) accepted")
	}
	if _, err := duration.ParseAge("-1d2h"); err == nil {
		t.Errorf("duration.ParseAge(-1d2h) accepted")
	}
}
