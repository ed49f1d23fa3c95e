package cli

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errDurationSyntax is the one refusal of a malformed duration.
var errDurationSyntax = errors.New("want a duration like 90d, 36h or 30m")

// parseDuration is msgq's one duration grammar, for every flag and input
// that takes a duration: a Go duration (90s, 1.5h, 36h30m) or a whole number
// of days with an optional Go duration after it (90d, 1d12h). A leading -
// negates the whole; callers that take no negative use parseAge.
func parseDuration(s string) (time.Duration, error) {
	if rest, neg := strings.CutPrefix(s, "-"); neg {
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, errDurationSyntax
		}
		d, err := parseDuration(rest)
		return -d, err
	}
	const day = 24 * time.Hour
	var total time.Duration
	// No Go duration unit has a d, so a d can only end the days.
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 63)
		if err != nil || n > uint64(math.MaxInt64/day) {
			return 0, errDurationSyntax
		}
		if total, s = time.Duration(n)*day, rest; s == "" {
			return total, nil
		}
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			return 0, errors.New("must not be negative")
		}
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errDurationSyntax
	case total > math.MaxInt64-d:
		return 0, errors.New("too long")
	}
	return total + d, nil
}

// parseAge is parseDuration for an age or a threshold: never negative.
func parseAge(s string) (time.Duration, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	return parseDuration(s)
}

// durationValue gives a duration flag msgq's grammar. It wraps the value
// the flag was defined with (pflag's own), so defaults, help and the
// variable it sets stay as they were; only what Set accepts grows.
type durationValue struct{ pflag.Value }

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	// A Go duration's String is always one time.ParseDuration reads back.
	return v.Value.Set(d.String())
}

// oneDurationGrammar makes every duration flag of the tree read
// parseDuration's grammar, so that 1d means the same to stats --window as
// to purge --older-than, including flags added later.
func oneDurationGrammar(c *cobra.Command) {
	wrap := func(f *pflag.Flag) {
		if f.Value.Type() == "duration" {
			if _, done := f.Value.(durationValue); !done {
				f.Value = durationValue{f.Value}
			}
		}
	}
	c.Flags().VisitAll(wrap)
	c.PersistentFlags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		oneDurationGrammar(sub)
	}
}
