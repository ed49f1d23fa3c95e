package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/store"
)

var _ store.SQLEnqueuer = (*Store)(nil)

// SQLIdentitiesRecord records the identities enqueue() accepts
// (sql_identities, migrations/0017_sql_enqueue.sql; max_segments 0018's,
// the quiet_* columns 0020's).
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
		if id.QuietWindow != "" {
			if _, err := quiet.Parse(id.QuietWindow); err != nil {
				return &store.InvalidError{Field: "quiet_hours", Msg: fmt.Sprintf("identity %s: %v", id.Name, err)}
			}
			if id.QuietZone == "" {
				return &store.InvalidError{Field: "quiet_zone", Msg: fmt.Sprintf("identity %s: quiet_hours needs quiet_zone", id.Name)}
			}
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
			if id.QuietZone != "" {
				// enqueue() reads windows in the zone by AT TIME ZONE: a
				// name the server's zone database lacks is refused here,
				// not at every send (tried in a savepoint: the view
				// pg_timezone_names would say it too, but reads every zone
				// file).
				sp, err := tx.Begin(ctx)
				if err != nil {
					return fmt.Errorf("postgres: record identity %s: %w", id.Name, err)
				}
				_, err = sp.Exec(ctx, "SELECT now() AT TIME ZONE $1", id.QuietZone)
				var pe *pgconn.PgError
				switch {
				case errors.As(err, &pe) && pe.Code == "22023": // invalid_parameter_value: time zone not recognized
					if err := sp.Rollback(ctx); err != nil {
						return fmt.Errorf("postgres: record identity %s: %w", id.Name, err)
					}
					return &store.InvalidError{Field: "quiet_zone", Msg: fmt.Sprintf("identity %s: the database server does not know the time zone %q", id.Name, id.QuietZone)}
				case err != nil:
					return fmt.Errorf("postgres: record identity %s: %w", id.Name, err)
				}
				if err := sp.Commit(ctx); err != nil {
					return fmt.Errorf("postgres: record identity %s: %w", id.Name, err)
				}
			}
			lanes, purposes := id.QuietExemptLanes, id.QuietExemptPurposes
			if lanes == nil {
				lanes = []string{}
			}
			if purposes == nil {
				purposes = []string{}
			}
			if _, err := tx.Exec(ctx, "INSERT INTO sql_identities (name, channels, max_segments, quiet_window, quiet_zone, "+
				"quiet_exempt_lanes, quiet_exempt_purposes, updated_at) VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6, $7, $8) "+
				"ON CONFLICT (name) DO UPDATE SET channels = excluded.channels, max_segments = excluded.max_segments, "+
				"quiet_window = excluded.quiet_window, quiet_zone = excluded.quiet_zone, quiet_exempt_lanes = excluded.quiet_exempt_lanes, "+
				"quiet_exempt_purposes = excluded.quiet_exempt_purposes, updated_at = excluded.updated_at",
				id.Name, id.Channels, id.MaxSegments, id.QuietWindow, id.QuietZone, lanes, purposes, now); err != nil {
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
