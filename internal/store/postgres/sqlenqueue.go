package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

var _ store.SQLEnqueuer = (*Store)(nil)

// SQLIdentitiesRecord records the identity names enqueue() accepts
// (sql_identities, migrations/0026_sql_intake.sql).
func (s *Store) SQLIdentitiesRecord(ctx context.Context, ids []store.SQLIdentity) error {
	def := ""
	for _, id := range ids {
		if id.Name == "" {
			return &store.InvalidError{Field: "identity", Msg: "is required"}
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
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = id.Name
		}
		if _, err := tx.Exec(ctx, "INSERT INTO sql_identities (name, updated_at) SELECT unnest($1::text[]), $2 "+
			"ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at", names, now); err != nil {
			return fmt.Errorf("postgres: record identities: %w", err)
		}
		if def != "" {
			if _, err := tx.Exec(ctx, "UPDATE sql_identities SET is_default = (name = $1) WHERE is_default OR name = $1", def); err != nil {
				return fmt.Errorf("postgres: record the default identity: %w", err)
			}
		}
		return nil
	})
}

// intakeListSQL reads the rows waiting for the admission through
// messages_intake (0026), oldest first: its cost is the intake rows', not
// the table's.
const intakeListSQL = `SELECT id, tenant, key, identity, coalesce(payload, '{}'), created_at FROM messages
WHERE state = 'intake' AND identity = ANY($1::text[]) ORDER BY id LIMIT $2`

// IntakeList is up to limit intake rows of identities, oldest first.
func (s *Store) IntakeList(ctx context.Context, identities []string, limit int) ([]store.IntakeRow, error) {
	rs, err := s.pool.Query(ctx, intakeListSQL, identities, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list intake: %w", err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (store.IntakeRow, error) {
		var row store.IntakeRow
		var input string
		err := r.Scan(&row.ID, &row.Tenant, &row.Key, &row.Identity, &input, &row.CreatedAt)
		row.Input = []byte(input)
		return row, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list intake: %w", err)
	}
	return out, nil
}

// intakeAdmitSQL queues an intake row as the admission made it, and
// writes its history entry, in one statement: nothing if the row left
// intake meanwhile (another process decided it).
const intakeAdmitSQL = `WITH u AS (
  UPDATE messages SET body_hash = $2, recipient = $3, channel = $4, identity = $5, purpose = $6, trigger_ref = $7,
    lane = $8, payload = $9, state = $10, next_attempt_at = $11, expires_at = $12, updated_at = $13
  WHERE id = $1 AND state = 'intake' RETURNING id)
INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT u.id, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE message_id = $1), 'intake', $10, '', $14, true, $15, '', $13
FROM u RETURNING message_id`

// intakeFailSQL fails an intake row (invalid or expired) with its history
// entry, likewise.
const intakeFailSQL = `WITH u AS (
  UPDATE messages SET state = $2, reason = $3, last_error = $4, updated_at = $5
  WHERE id = $1 AND state = 'intake' RETURNING id)
INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
SELECT u.id, (SELECT coalesce(max(seq), 0) + 1 FROM history WHERE message_id = $1), 'intake', $2, $3, $6, true, $7, $4, $5
FROM u RETURNING message_id`

// IntakeDecide writes the admission's decisions in one transaction, one
// round trip for the batch; rules.Intake decides what each writes.
func (s *Store) IntakeDecide(ctx context.Context, ds []store.IntakeDecision) (store.IntakeResult, error) {
	var res store.IntakeResult
	if len(ds) == 0 {
		return res, nil
	}
	err := s.inTx(ctx, "decide intake", func(tx pgx.Tx) error {
		res = store.IntakeResult{}
		now, err := s.clock(ctx, tx)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		ws := make([]rules.IntakeWrite, len(ds))
		for i, d := range ds {
			w := rules.Intake(d, now)
			ws[i] = w
			if m := w.Msg; m != nil {
				payload, _ := json.Marshal(m.Payload)
				b.Queue(intakeAdmitSQL, d.ID, m.BodyHash, m.To, m.Channel, m.Identity, m.Purpose, m.TriggerRef, m.Lane,
					string(payload), string(m.State), m.NextAttemptAt, m.ExpiresAt, now, w.Event, store.SourceAdmission)
				continue
			}
			b.Queue(intakeFailSQL, d.ID, string(w.To), string(w.Reason), w.Detail, now, w.Event, store.SourceAdmission)
		}
		br := tx.SendBatch(ctx, b)
		for _, w := range ws {
			var id string
			err := br.QueryRow().Scan(&id)
			switch {
			case err == pgx.ErrNoRows:
				res.Skipped++
			case err != nil:
				br.Close()
				return fmt.Errorf("postgres: decide intake: %w", err)
			case w.Msg != nil:
				res.Admitted++
			case w.Reason == state.Expired:
				res.Expired++
			default:
				res.Invalid++
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("postgres: decide intake: %w", err)
		}
		if res.Admitted > 0 {
			// Drains following the queue (drain --follow) are woken at
			// commit for the rows now queued.
			if _, err := tx.Exec(ctx, notifySQL); err != nil {
				return fmt.Errorf("postgres: decide intake: %w", err)
			}
		}
		return nil
	})
	return res, err
}
