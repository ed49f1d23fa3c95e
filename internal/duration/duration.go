// Package duration is msgq's one grammar for durations people write (flags,
// config, input: 90d, 36h, 1d12h) and its one way of printing them back.
package duration

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is the one refusal of a malformed duration.
var ErrSyntax = errors.New("want a duration like 90d, 36h or 30m")

// Parse is msgq's one duration grammar, for every flag and input
// that takes a duration: a Go duration (90s, 1.5h, 36h30m) or a whole number
// of days with an optional Go duration after it (90d, 1d12h). A leading -
// negates the whole; callers that take no negative use ParseAge.
func Parse(s string) (time.Duration, error) {
	if rest, neg := strings.CutPrefix(s, "-"); neg {
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, ErrSyntax
		}
		d, err := Parse(rest)
		return -d, err
	}
	const day = 24 * time.Hour
	var total time.Duration
	// No Go duration unit has a d, so a d can only end the days.
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 63)
		if err != nil || n > uint64(math.MaxInt64/day) {
			return 0, ErrSyntax
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
		return 0, ErrSyntax
	case total > math.MaxInt64-d:
		return 0, errors.New("too long")
	}
	return total + d, nil
}

// ParseAge is Parse for an age or a threshold: never negative.
func ParseAge(s string) (time.Duration, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	return Parse(s)
}

// Human rounds a duration for people: to the second from ten seconds up,
// to the millisecond below, and drops a trailing "0s" ("5m0s" is "5m").
func Human(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		d = d.Round(time.Second)
	case d >= time.Millisecond:
		d = d.Round(time.Millisecond)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
