package quiet

import (
	"fmt"
	"slices"
	"time"
)

// Off is the per-send override that turns quiet hours off for one row.
const Off = "off"

// emailChannel is the channel whose recipients carry no zone of their own
// (internal/recipient.Email; not imported: this package stays a leaf).
const emailChannel = "email"

// Policy is one identity's quiet hours: its window (nil: none), the zone
// for rows whose recipient has no single zone of its own (email, numbers
// of a country that spans several zones), and the lanes and purposes that
// are exempt (a verification code in the reply lane goes out at 3 a.m.).
type Policy struct {
	Window         *Window
	Zone           *time.Location
	ExemptLanes    []string
	ExemptPurposes []string
}

// Row is what the policy needs of one message.
type Row struct {
	To, Channel, Lane, Purpose string
	// Override is the row's own setting: "" for the identity's, Off for
	// none, or a window ("22:00-07:00") that replaces the identity's and
	// is not subject to its exemptions (the sender asked for it).
	Override string
}

// Hold is a row's quiet window in force at one instant.
type Hold struct {
	Window Window
	Zone   *time.Location
	// Until is the first instant outside the window.
	Until time.Time
}

// String says the hold in one phrase, for history and last_error.
func (h Hold) String() string {
	return fmt.Sprintf("quiet hours %s (%s): waits until %s", h.Window, h.Zone, h.Until.UTC().Format(time.RFC3339))
}

// CheckOverride says whether a per-send override is well formed.
func CheckOverride(s string) error {
	if s == "" || s == Off {
		return nil
	}
	if _, err := Parse(s); err != nil {
		return fmt.Errorf("%w (or %s)", err, Off)
	}
	return nil
}

// window is the window that applies to r, and the zone it is read in:
// ok false when none applies (off, exempt, no window). A window without a
// zone (the recipient has no single zone and the policy names none) is
// returned with a nil zone: the caller must not guess one.
func (p Policy) window(r Row) (Window, *time.Location, bool, error) {
	var w Window
	switch r.Override {
	case Off:
		return Window{}, nil, false, nil
	case "":
		if p.Window == nil || slices.Contains(p.ExemptLanes, r.Lane) || (r.Purpose != "" && slices.Contains(p.ExemptPurposes, r.Purpose)) {
			return Window{}, nil, false, nil
		}
		w = *p.Window
	default:
		var err error
		if w, err = Parse(r.Override); err != nil {
			return Window{}, nil, false, err
		}
	}
	zone := p.Zone
	if r.Channel != emailChannel {
		zone = Zone(r.To, p.Zone)
	}
	return w, zone, true, nil
}

// ErrNoZoneKnown says a window applies but no zone is known to read it
// in: the recipient's number spans several zones (or none is known) and
// the identity has no quiet_zone.
var ErrNoZoneKnown = fmt.Errorf("%w and the identity has no quiet_zone", ErrNoZone)

// Check says whether r's window can be decided: a bad override or a
// window with no zone to read it in is an error (bad input at enqueue).
func (p Policy) Check(r Row) error {
	_, zone, ok, err := p.window(r)
	switch {
	case err != nil:
		return err
	case ok && zone == nil:
		return ErrNoZoneKnown
	}
	return nil
}

// At returns r's hold at t: ok true when t is inside the window that
// applies to r. A window with no zone known holds nothing (Check refuses
// such rows at enqueue; a row enqueued before the configuration changed
// is not held on a guess).
func (p Policy) At(t time.Time, r Row) (Hold, bool) {
	w, zone, ok, err := p.window(r)
	if err != nil || !ok || zone == nil || !w.Quiet(t, zone) {
		return Hold{}, false
	}
	return Hold{Window: w, Zone: zone, Until: w.Ends(t, zone)}, true
}

// Schedule is quiet hours at enqueue for one send (the admission's,
// internal/queue/admit.go's quietSchedule): now is the admitting clock; notBefore and
// notBeforeIn, expiresAt and expiresIn are the send's (zero: not given).
// held says the send is due inside r's window and must wait until its
// end, until. An error is bad input at enqueue: a malformed override, a
// window with no zone to read it in, or a deadline that is not after the
// window's end (the send could never go out).
func (p Policy) Schedule(r Row, now, notBefore time.Time, notBeforeIn time.Duration, expiresAt time.Time, expiresIn time.Duration) (until time.Time, held bool, err error) {
	if err := CheckOverride(r.Override); err != nil {
		return time.Time{}, false, err
	}
	if err := p.Check(r); err != nil {
		return time.Time{}, false, fmt.Errorf("%s: %w", r.Override, err)
	}
	due := now
	switch {
	case notBeforeIn > 0:
		due = now.Add(notBeforeIn)
	case !notBefore.IsZero() && notBefore.After(now):
		due = notBefore
	}
	h, ok := p.At(due, r)
	if !ok {
		return time.Time{}, false, nil
	}
	deadline := expiresAt
	if expiresIn > 0 {
		deadline = now.Add(expiresIn)
	}
	if !deadline.IsZero() && !deadline.After(h.Until) {
		return time.Time{}, false, fmt.Errorf("the message expires at %s, inside the recipient's %s: it could never go out (send it with quiet_hours off, or exempt its lane or purpose)",
			deadline.UTC().Format(time.RFC3339), h)
	}
	return h.Until, true, nil
}
