package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
)

var _ store.SQLEnqueuer = (*Store)(nil)

// SQLIdentitiesRecord records the identities enqueue() accepts
// (sql_identities, migrations/0017_sql_enqueue.sql; max_segments 0018's).
func (s *Store) SQLIdentitiesRecord(ctx context.Context, ids []store.SQLIdentity) error {
	def := ""
	for _, id := range ids {
		if id.Name == "" {
			return &store.InvalidError{Field: "identity", Msg: "is required"}
		}
		if len(id.Channels) == 0 {
			return &store.InvalidError{Field: "channels", Msg: fmt.Sprintf("identity %s sends on no channel", id.Name)}
		}
		if id.MaxSegments < 0 {
			return &store.InvalidError{Field: "max_segments", Msg: fmt.Sprintf("identity %s: %d is not a number of SMS segments (0: no limit)", id.Name, id.MaxSegments)}
		}
		if id.Default {
			def = id.Name
		}
	}
	return s.inTx(ctx, "record identities", func(tx pgx.Tx) error {
		now, err := s.clock(ctx, tx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.Exec(ctx, "INSERT INTO sql_identities (name, channels, max_segments, updated_at) VALUES ($1, $2, $3, $4) "+
				"ON CONFLICT (name) DO UPDATE SET channels = excluded.channels, max_segments = excluded.max_segments, updated_at = excluded.updated_at",
				id.Name, id.Channels, id.MaxSegments, now); err != nil {
				return fmt.Errorf("postgres: record identity %s: %w", id.Name, err)
			}
		}
		if def != "" {
			if _, err := tx.Exec(ctx, "UPDATE sql_identities SET is_default = (name = $1) WHERE is_default OR name = $1", def); err != nil {
				return fmt.Errorf("postgres: record the default identity: %w", err)
			}
		}
		return nil
	})
}
