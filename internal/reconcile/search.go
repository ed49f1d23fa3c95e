package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// search is one row's provider search: what the provider listed that
// could be the row, and which of those other rows already own.
type search struct {
	around time.Time
	found  []provider.Candidate
	// owners are, by provider id, the other rows of the row's identity
	// that record it (two for a provider id collision).
	owners map[string][]store.ProviderIDOwner
	// failed, when set, is why nothing was listed (the search failed or
	// could not be made).
	failed string
}

// free is the candidates no other row owns: the only ones that can be
// the row's own message.
func (s *search) free() []provider.Candidate {
	var out []provider.Candidate
	for _, c := range s.found {
		if len(s.owners[c.ID]) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// searchFor asks f for the messages m may have become when its send's
// answer (and so the provider's id) was lost, and the store which of them
// other rows of m's identity already record: a message another row owns
// is that row's (a second send of the same text to the same number, or
// an operator's resend of m), never m's. A search that fails is said in
// the result; the error is the store's.
func searchFor(ctx context.Context, st store.Store, m store.StuckMessage, f Finder, around time.Time, timeout time.Duration) (*search, error) {
	s := &search{around: around}
	if m.Payload == nil {
		s.failed = "no provider id, and no content to search for"
		return s, nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg := &provider.Message{ID: m.ID, To: m.To, Channel: m.Channel, Payload: *m.Payload}
	found, res := f.Find(cctx, msg, around)
	if res.Class != retry.Accepted {
		s.failed = "no provider id, and the search failed: " + lookupFailure(res)
		return s, nil
	}
	s.found = found
	if len(found) == 0 {
		return s, nil
	}
	ids := make([]string, len(found))
	for i, c := range found {
		ids[i] = c.ID
	}
	owners, err := st.MessageProviderIDOwners(ctx, m.Identity, ids)
	if err != nil {
		return nil, err
	}
	s.owners = map[string][]store.ProviderIDOwner{}
	for _, o := range owners {
		if o.ID != m.ID { // m itself has no provider id; should one appear meanwhile, it is no rival
			s.owners[o.ProviderID] = append(s.owners[o.ProviderID], o)
		}
	}
	return s, nil
}

// rivalsOf lists, by identity and provider id, the rows of this run
// whose searches left that message free: a message two unknown rows
// without provider ids could each be is neither's to settle on.
func rivalsOf(cands []candidate, searches []*search) map[string][]store.StuckMessage {
	rivals := map[string][]store.StuckMessage{}
	for i, s := range searches {
		if s == nil {
			continue
		}
		for _, c := range s.free() {
			k := rivalKey(cands[i].row.Identity, c.ID)
			rivals[k] = append(rivals[k], cands[i].row)
		}
	}
	return rivals
}

func rivalKey(identity, pid string) string { return identity + "\x00" + pid }

// decide settles m on its search only when exactly one candidate is free
// (no other row records it) and no other row of the run has it free too:
// it returns the evidence with that candidate's id, for the row to keep.
// Anything else leaves the row with a note naming the candidates and
// their owners. p reads the candidate's status (statusOf).
func decide(m store.StuckMessage, s *search, rivals map[string][]store.StuckMessage, p any) outcome {
	if s.failed != "" {
		return outcome{note: s.failed}
	}
	near := stamp(s.around)
	if len(s.found) == 0 {
		return outcome{note: fmt.Sprintf("no provider id, and the provider lists no message that matches it (near %s): not settled", near)}
	}
	free := s.free()
	listed := fmt.Sprintf("no provider id, and the provider lists %s (near %s): %s", matching(len(s.found)), near, s.describe(m, rivals))
	switch {
	case len(free) == 0 && len(s.found) == 1:
		return outcome{note: listed + ": it is another row's, not this one's: not settled"}
	case len(free) == 0:
		return outcome{note: listed + ": each is another row's, so none is this one's: not settled"}
	case len(free) > 1:
		return outcome{note: listed + ": which is this one cannot be told"}
	case len(others(rivals, m, free[0].ID)) > 0:
		return outcome{note: listed + ": the one no row owns matches another unknown row too, so which is this one cannot be told"}
	}
	c := free[0]
	status := statusOf(p, c.Status)
	owned := len(s.found) > 1 // the others are other rows' own
	if status == state.None {
		if owned {
			return outcome{note: fmt.Sprintf("%s: the one no other row owns, %s, reports %q, which settles nothing", listed, c.ID, c.Status)}
		}
		return outcome{note: fmt.Sprintf("no provider id; the one message that matches it, %s, reports %q, which settles nothing", c.ID, c.Status)}
	}
	why := fmt.Sprintf("provider search (no provider id): one message matches it, %s, status %q", c.ID, c.Status)
	if owned {
		why = fmt.Sprintf("provider search (no provider id): one message matches it that no other row owns, %s, status %q", c.ID, c.Status)
	}
	if c.Code != "" {
		why += ", code " + c.Code
	}
	if owned {
		why += "; the provider also lists " + s.describeOwned(m)
	}
	return outcome{status: status, pid: c.ID, why: why}
}

// matching is "1 message that matches it" or "N messages that match it".
func matching(n int) string {
	if n == 1 {
		return "1 message that matches it"
	}
	return fmt.Sprintf("%d messages that match it", n)
}

// maxListed bounds the candidates a note names: a note is one line.
const maxListed = 10

// describe names the candidates with their owners, for a note:
// "SM1 (owned by order-2 / 01J...), SM2 (no row)".
func (s *search) describe(m store.StuckMessage, rivals map[string][]store.StuckMessage) string {
	parts := make([]string, 0, min(len(s.found), maxListed))
	for _, c := range s.found[:min(len(s.found), maxListed)] {
		parts = append(parts, c.ID+" ("+s.whose(m, c.ID, rivals)+")")
	}
	if n := len(s.found) - maxListed; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(parts, ", ")
}

// describeOwned names the candidates other rows own, for the history
// detail of a row settled on the one they do not.
func (s *search) describeOwned(m store.StuckMessage) string {
	var parts []string
	n := 0
	for _, c := range s.found {
		if len(s.owners[c.ID]) == 0 {
			continue
		}
		if n++; n <= maxListed {
			parts = append(parts, c.ID+" ("+s.whose(m, c.ID, nil)+")")
		}
	}
	if n > maxListed {
		parts = append(parts, fmt.Sprintf("and %d more", n-maxListed))
	}
	return strings.Join(parts, ", ")
}

// whose says who owns the candidate pid: "owned by KEY / ID" (each row,
// for a collision), "no row", or the other unknown rows of the run it
// could also be.
func (s *search) whose(m store.StuckMessage, pid string, rivals map[string][]store.StuckMessage) string {
	if os := s.owners[pid]; len(os) > 0 {
		names := make([]string, len(os))
		for i, o := range os {
			names[i] = ownerName(m, o)
		}
		return "owned by " + strings.Join(names, " and ")
	}
	rs := others(rivals, m, pid)
	if len(rs) == 0 {
		return "no row"
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Key + " / " + r.ID
	}
	return "no row; also matches unknown " + strings.Join(names, " and ")
}

// ownerName names a row that owns a candidate: its key and id, its
// tenant when it is not m's, and whether it is a resend of m.
func ownerName(m store.StuckMessage, o store.ProviderIDOwner) string {
	name := o.Key + " / " + o.ID
	if o.Tenant != m.Tenant {
		name = "tenant " + o.Tenant + "'s " + name
	}
	if o.ResendOf == m.ID {
		name = "its resend " + name
	}
	return name
}

// others is the rows of the run other than m that have pid free.
func others(rivals map[string][]store.StuckMessage, m store.StuckMessage, pid string) []store.StuckMessage {
	var out []store.StuckMessage
	for _, r := range rivals[rivalKey(m.Identity, pid)] {
		if r.ID != m.ID {
			out = append(out, r)
		}
	}
	return out
}

// keepNotes records the note of each row left for a person whose note
// differs (the first, or what reconcile found changed), in batches.
func keepNotes(ctx context.Context, st store.Store, left []candidate) error {
	var ps []store.NoteParams
	for _, c := range left {
		if c.note != "" && c.note != c.row.Note {
			ps = append(ps, store.NoteParams{ID: c.row.ID, State: state.Unknown, Note: c.note})
		}
	}
	for start := 0; start < len(ps); start += batchSize {
		if err := st.MessageNoteMany(ctx, ps[start:min(start+batchSize, len(ps))]); err != nil {
			return err
		}
	}
	return nil
}
