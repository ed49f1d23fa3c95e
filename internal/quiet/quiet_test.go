package quiet

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseReadsWindowsAndRefusesNonsense(t *testing.T) {
	for in, want := range map[string]Window{
		"21:00-08:00":   {21 * 60, 8 * 60},
		"09:30-17:45":   {9*60 + 30, 17*60 + 45},
		" 22:00-24:00 ": {22 * 60, 0},
		"00:00-06:00":   {0, 6 * 60},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "21:00", "21-08", "25:00-08:00", "21:60-08:00", "8:00-9:00", "21:00-21:00", "24:00-08:00", "aa:bb-cc:dd"} {
		if w, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, w)
		}
	}
	if s := (Window{21 * 60, 8 * 60}).String(); s != "21:00-08:00" {
		t.Errorf("String = %q", s)
	}
}

func TestAnOvernightWindowHoldsUntilMorningLocalTime(t *testing.T) {
	w, _ := Parse("21:00-08:00")
	ny := mustLoad(t, "America/New_York")
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, ny)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct{ now, ends string }{
		{"2026-06-10 20:59", "2026-06-10 20:59"}, // not quiet: goes now
		{"2026-06-10 21:00", "2026-06-11 08:00"},
		{"2026-06-10 23:30", "2026-06-11 08:00"},
		{"2026-06-11 03:00", "2026-06-11 08:00"},
		{"2026-06-11 07:59", "2026-06-11 08:00"},
		{"2026-06-11 08:00", "2026-06-11 08:00"},
	}
	for _, c := range cases {
		if got := w.Ends(at(c.now), ny); !got.Equal(at(c.ends)) {
			t.Errorf("at %s: ends %s, want %s", c.now, got.In(ny), c.ends)
		}
	}
	// The same instant is quiet in one zone and not in another: the
	// window is the recipient's local time.
	tokyo := mustLoad(t, "Asia/Tokyo")
	noonNY := at("2026-06-10 12:00") // 01:00 in Tokyo
	if w.Quiet(noonNY, ny) || !w.Quiet(noonNY, tokyo) {
		t.Errorf("noon in New York: quiet there %v (want false), in Tokyo %v (want true)", w.Quiet(noonNY, ny), w.Quiet(noonNY, tokyo))
	}
}

func TestDaylightSavingChangesEndTheWindowAtLocalWallClockTime(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	overnight, _ := Parse("21:00-08:00")
	// Spring forward: 2026-03-08 02:00 EST becomes 03:00 EDT. The night is
	// an hour shorter; the window still ends at 08:00 local (12:00 UTC,
	// not 13:00).
	eve := time.Date(2026, 3, 7, 22, 0, 0, 0, ny)
	if got, want := overnight.Ends(eve, ny), time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("spring forward: ends %s, want %s", got.UTC(), want)
	}
	// Fall back: 2026-11-01 02:00 EDT becomes 01:00 EST; the night is an
	// hour longer, 08:00 EST is 13:00 UTC.
	eve = time.Date(2026, 10, 31, 23, 0, 0, 0, ny)
	if got, want := overnight.Ends(eve, ny), time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("fall back: ends %s, want %s", got.UTC(), want)
	}
	// A window whose end the spring-forward skips (02:30 does not exist
	// on 2026-03-08) ends at the first instant after the gap: 03:00 EDT.
	w, _ := Parse("01:00-02:30")
	in := time.Date(2026, 3, 8, 1, 30, 0, 0, ny) // EST
	if got, want := w.Ends(in, ny), time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("end in the gap: ends %s (%s), want %s (03:00 EDT)", got.UTC(), got.In(ny), want)
	}
	// The hour a fall-back repeats is quiet both times for a window that
	// covers it: 01:30 EDT and, an hour later, 01:30 EST.
	w, _ = Parse("01:00-02:00")
	first := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)  // 01:30 EDT
	second := time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC) // 01:30 EST
	if !w.Quiet(first, ny) || !w.Quiet(second, ny) {
		t.Errorf("repeated hour: quiet %v and %v, want both", w.Quiet(first, ny), w.Quiet(second, ny))
	}
	// So the window ends once, at 02:00 EST: 02:00 EDT never shows on the
	// clock (it reads 01:00 EST, inside the window again).
	if got, want := w.Ends(first, ny), time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("first 01:30: ends %s, want %s (02:00 EST)", got.UTC(), want)
	}
}

// TestEndsIsTheFirstMinuteOutside checks, for random windows, zones and
// instants, that Ends is outside the window and that every whole minute
// from the instant up to it is inside: a row is held no longer than the
// window and never released early.
func TestEndsIsTheFirstMinuteOutside(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Apia", "America/Santiago"}
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.IntRange(0, minutesPerDay-1).Draw(t, "start")
		end := rapid.IntRange(0, minutesPerDay-1).Filter(func(e int) bool { return e != start }).Draw(t, "end")
		w := Window{start, end}
		loc, err := time.LoadLocation(rapid.SampledFrom(zones).Draw(t, "zone"))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(rapid.Int64Range(1700000000, 1900000000).Draw(t, "unix"), 0)
		got := w.Ends(now, loc)
		if w.Quiet(got, loc) {
			t.Fatalf("%v in %s from %s: Ends %s is quiet", w, loc, now.In(loc), got.In(loc))
		}
		if got.Before(now) || got.Sub(now) > 25*time.Hour {
			t.Fatalf("%v in %s from %s: Ends %s", w, loc, now.In(loc), got.In(loc))
		}
		for m := now.Truncate(time.Minute).Add(time.Minute); m.Before(got); m = m.Add(time.Minute) {
			if !w.Quiet(m, loc) {
				t.Fatalf("%v in %s from %s: %s is outside the window but Ends said %s", w, loc, now.In(loc), m.In(loc), got.In(loc))
			}
		}
	})
}

func TestZoneComesFromTheNumber(t *testing.T) {
	for num, want := range map[string]string{
		"+442071838750": "Europe/London",
		"+81312345678":  "Asia/Tokyo",
		"+12125551234":  "America/New_York",
		"+13105551234":  "America/Los_Angeles",
	} {
		loc, err := ZoneOf(num)
		if err != nil || loc.String() != want {
			t.Errorf("ZoneOf(%s) = %v, %v; want %s", num, loc, err, want)
		}
	}
	// A North American toll-free number rings in every US zone: the
	// number alone does not say which, and the configured zone is used.
	if loc, err := ZoneOf("+18002752273"); !errors.Is(err, ErrNoZone) {
		t.Errorf("ZoneOf(+1 800...) = %v, %v; want ErrNoZone", loc, err)
	}
	fallback := mustLoad(t, "America/Chicago")
	if got := Zone("+18002752273", fallback); got != fallback {
		t.Errorf("Zone fell back to %v, want %v", got, fallback)
	}
	if got := Zone("", nil); got != nil {
		t.Errorf("Zone of an email recipient with no configured zone = %v, want nil", got)
	}
}
