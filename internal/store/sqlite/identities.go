package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// IdentityPause marks an identity paused, with the reason.
func (s *Store) IdentityPause(ctx context.Context, name, reason string) error {
	if name == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	now := micros(s.clock())
	_, err := s.w.ExecContext(ctx, pauseSQL, name, reason, now, now)
	if err != nil {
		return fmt.Errorf("sqlite: pause %s: %w", name, err)
	}
	return nil
}

// IdentityResume clears an identity's pause.
func (s *Store) IdentityResume(ctx context.Context, name string) error {
	if name == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	_, err := s.w.ExecContext(ctx, "UPDATE identities SET paused = 0, paused_reason = '', paused_at = NULL, updated_at = ? WHERE name = ?",
		micros(s.clock()), name)
	if err != nil {
		return fmt.Errorf("sqlite: resume %s: %w", name, err)
	}
	return nil
}

// IdentityStates lists known identities with their queue counts.
func (s *Store) IdentityStates(ctx context.Context) ([]store.IdentityState, error) {
	tally := store.IdentityTally{}
	rs, err := s.r.QueryContext(ctx, "SELECT name, paused, paused_reason, paused_at FROM identities")
	if err != nil {
		return nil, fmt.Errorf("sqlite: identities: %w", err)
	}
	for rs.Next() {
		var name, reason string
		var paused bool
		var at sql.NullInt64
		if err := rs.Scan(&name, &paused, &reason, &at); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: identities: %w", err)
		}
		tally.Pause(name, paused, reason, fromNullMicros(at))
	}
	if err := rs.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: identities: %w", err)
	}
	rs, err = s.r.QueryContext(ctx, "SELECT identity, state, count(*) FROM messages WHERE state IN ('queued', 'sending', 'unknown') GROUP BY identity, state")
	if err != nil {
		return nil, fmt.Errorf("sqlite: identities: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var name, st string
		var n int
		if err := rs.Scan(&name, &st, &n); err != nil {
			return nil, fmt.Errorf("sqlite: identities: %w", err)
		}
		tally.Count(name, st, n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: identities: %w", err)
	}
	return tally.States(), nil
}

// PaceDefer moves a pacing slot later, never earlier.
func (s *Store) PaceDefer(ctx context.Context, identity, recipient string, until time.Time) error {
	if identity == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	var err error
	if recipient == "" {
		_, err = s.w.ExecContext(ctx, "INSERT INTO identity_pace (identity, next_at) VALUES (?, ?) "+
			"ON CONFLICT (identity) DO UPDATE SET next_at = max(next_at, excluded.next_at)", identity, micros(until))
	} else {
		_, err = s.w.ExecContext(ctx, "INSERT INTO recipient_pace (identity, recipient, next_at) VALUES (?, ?, ?) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET next_at = max(next_at, excluded.next_at)", identity, recipient, micros(until))
	}
	if err != nil {
		return fmt.Errorf("sqlite: defer pacing of %s: %w", identity, err)
	}
	return nil
}
