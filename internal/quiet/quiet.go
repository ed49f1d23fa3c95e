// Package quiet decides quiet hours: a daily window of local wall-clock
// time (such as 21:00-08:00) in the recipient's time zone during which a
// due message waits instead of going out. It is pure: the caller gives the
// instant and the zone; the package says whether the instant is quiet and
// when the window ends.
//
// The window is wall-clock time, so daylight-saving changes are honoured
// the way a person would expect: a window that ends at 08:00 ends at 08:00
// local time on the day the clocks change, however long the night was. An
// end that falls in the hour a spring-forward skips ends at the first
// instant after the gap; in the hour a fall-back repeats, the repeated
// wall-clock minutes are quiet (or not) each time they occur.
package quiet

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// The zone database travels with the binary: releases run on hosts
	// (and containers) without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/nyaruka/phonenumbers"
)

// Window is a daily quiet window [Start, End) in minutes after local
// midnight. Start > End wraps past midnight (21:00-08:00); Start == End is
// refused by Parse (a window of no length or of the whole day is a
// configuration mistake, not a policy).
type Window struct {
	Start, End int
}

// minutesPerDay bounds a clock reading.
const minutesPerDay = 24 * 60

// Parse reads "HH:MM-HH:MM" (24-hour clock, 00:00 to 23:59; "24:00" is
// accepted as an end meaning midnight).
func Parse(s string) (Window, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return Window{}, fmt.Errorf("quiet hours %q: want HH:MM-HH:MM, e.g. 21:00-08:00", s)
	}
	start, err := clock(a, false)
	if err != nil {
		return Window{}, fmt.Errorf("quiet hours %q: start: %w", s, err)
	}
	end, err := clock(b, true)
	if err != nil {
		return Window{}, fmt.Errorf("quiet hours %q: end: %w", s, err)
	}
	if end == minutesPerDay {
		end = 0
	}
	if start == end {
		return Window{}, fmt.Errorf("quiet hours %q: start and end are the same time", s)
	}
	return Window{Start: start, End: end}, nil
}

func clock(s string, end bool) (int, error) {
	s = strings.TrimSpace(s)
	var h, m int
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	if _, err := fmt.Sscanf(s, "%02d:%02d", &h, &m); err != nil {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	if end && h == 24 && m == 0 {
		return minutesPerDay, nil
	}
	if h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, fmt.Errorf("%q is not a time of day", s)
	}
	return h*60 + m, nil
}

// String writes the window back as Parse reads it.
func (w Window) String() string {
	return fmt.Sprintf("%02d:%02d-%02d:%02d", w.Start/60, w.Start%60, w.End/60, w.End%60)
}

// contains says whether a local time of day (minutes) is in the window.
func (w Window) contains(tod int) bool {
	if w.Start < w.End {
		return tod >= w.Start && tod < w.End
	}
	return tod >= w.Start || tod < w.End
}

// Quiet says whether t is inside the window in loc.
func (w Window) Quiet(t time.Time, loc *time.Location) bool {
	l := t.In(loc)
	return w.contains(l.Hour()*60 + l.Minute())
}

// Ends returns the first instant at or after t that is outside the window
// in loc: t itself when t is not quiet.
func (w Window) Ends(t time.Time, loc *time.Location) time.Time {
	if !w.Quiet(t, loc) {
		return t
	}
	l := t.In(loc)
	// The window's end today, or tomorrow for a window wrapping midnight
	// seen from its evening side.
	day := l.Day()
	if w.Start > w.End && l.Hour()*60+l.Minute() >= w.Start {
		day++
	}
	c := time.Date(l.Year(), l.Month(), day, w.End/60, w.End%60, 0, 0, loc)
	// time.Date places a wall-clock time that a spring-forward skips on
	// either side of the gap, and an end the fall-back repeats may lie
	// inside the repeated (still quiet) hour. Take the candidate only when
	// it is the first minute outside; otherwise walk the minutes from t,
	// which finds the first instant after the gap (bounded: the largest
	// gap in the zone database is a day, Samoa 2011).
	if c.After(t) && !w.Quiet(c, loc) && w.Quiet(c.Add(-time.Minute), loc) {
		return c
	}
	c = t.Truncate(time.Minute)
	for i := 0; i < 3*minutesPerDay; i++ {
		c = c.Add(time.Minute)
		if !w.Quiet(c, loc) {
			break
		}
	}
	return c
}

// ErrNoZone says a number's zone is not one zone: the number's country or
// region spans several (the United States, Russia, Brazil ...) or the
// phone library knows none. The caller then uses a configured zone.
var ErrNoZone = errors.New("the number does not map to a single time zone")

// ZoneOf returns the time zone of an E.164 number from the phone
// library's time-zone data (derived from the country and, where the
// numbering plan says, the region).
func ZoneOf(e164 string) (*time.Location, error) {
	num, err := phonenumbers.Parse(e164, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e164, err)
	}
	zones, err := phonenumbers.GetTimezonesForNumber(num)
	if err != nil {
		return nil, err
	}
	if len(zones) != 1 || zones[0] == phonenumbers.UNKNOWN_TIMEZONE {
		return nil, ErrNoZone
	}
	return time.LoadLocation(zones[0])
}

// Zone picks the zone for a recipient: the number's own when it has
// exactly one, else fallback (an identity's configured zone). A nil
// result means neither is known: the caller must not guess.
func Zone(e164 string, fallback *time.Location) *time.Location {
	if e164 != "" {
		if loc, err := ZoneOf(e164); err == nil {
			return loc
		}
	}
	return fallback
}
