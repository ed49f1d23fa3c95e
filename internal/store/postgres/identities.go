package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// IdentityPause marks an identity paused, with the reason.
func (s *Store) IdentityPause(ctx context.Context, name, reason string) error {
	if name == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, pauseSQL, name, reason, now)
	if err != nil {
		return fmt.Errorf("postgres: pause %s: %w", name, err)
	}
	return nil
}

// IdentityResume clears an identity's pause.
func (s *Store) IdentityResume(ctx context.Context, name string) error {
	if name == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, "UPDATE identities SET paused = false, paused_reason = '', paused_at = NULL, updated_at = $1 WHERE name = $2",
		now, name)
	if err != nil {
		return fmt.Errorf("postgres: resume %s: %w", name, err)
	}
	return nil
}

// IdentityStates lists known identities with their queue counts.
func (s *Store) IdentityStates(ctx context.Context) ([]store.IdentityState, error) {
	tally := store.IdentityTally{}
	rs, err := s.pool.Query(ctx, "SELECT name, paused, paused_reason, paused_at FROM identities")
	if err != nil {
		return nil, fmt.Errorf("postgres: identities: %w", err)
	}
	for rs.Next() {
		var name, reason string
		var paused bool
		var at *time.Time
		if err := rs.Scan(&name, &paused, &reason, &at); err != nil {
			rs.Close()
			return nil, fmt.Errorf("postgres: identities: %w", err)
		}
		tally.Pause(name, paused, reason, utcPtr(at))
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: identities: %w", err)
	}
	rs, err = s.pool.Query(ctx, "SELECT identity, state, count(*) FROM messages WHERE state IN ('queued', 'sending', 'unknown') GROUP BY identity, state")
	if err != nil {
		return nil, fmt.Errorf("postgres: identities: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var name, st string
		var n int
		if err := rs.Scan(&name, &st, &n); err != nil {
			return nil, fmt.Errorf("postgres: identities: %w", err)
		}
		tally.Count(name, st, n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: identities: %w", err)
	}
	return tally.States(), nil
}

// PaceDefer moves a pacing slot later, never earlier.
func (s *Store) PaceDefer(ctx context.Context, identity, recipient string, until time.Time) error {
	if identity == "" {
		return &store.InvalidError{Field: "identity", Msg: "is required"}
	}
	u := until.UTC().Truncate(store.Resolution)
	var err error
	if recipient == "" {
		_, err = s.pool.Exec(ctx, "INSERT INTO identity_pace (identity, next_at) VALUES ($1, $2) "+
			"ON CONFLICT (identity) DO UPDATE SET next_at = greatest(identity_pace.next_at, excluded.next_at)", identity, u)
	} else {
		_, err = s.pool.Exec(ctx, "INSERT INTO recipient_pace (identity, recipient, next_at) VALUES ($1, $2, $3) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET next_at = greatest(recipient_pace.next_at, excluded.next_at)", identity, recipient, u)
	}
	if err != nil {
		return fmt.Errorf("postgres: defer pacing of %s: %w", identity, err)
	}
	return nil
}
