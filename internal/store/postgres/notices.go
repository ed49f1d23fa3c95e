package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

const (
	// pauseSQL is IdentityPause's statement.
	pauseSQL = "INSERT INTO identities (name, paused, paused_reason, paused_at, updated_at) VALUES ($1, true, $2, $3, $3) " +
		"ON CONFLICT (name) DO UPDATE SET paused = true, paused_reason = excluded.paused_reason, " +
		"paused_at = CASE WHEN identities.paused THEN identities.paused_at ELSE excluded.paused_at END, updated_at = excluded.updated_at"
	insertNoticeSQL = `INSERT INTO notices (id, event_id, provider, identity, kind, field, code, subject, lang, value, detail,
	dedupe_key, at, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
	ON CONFLICT (provider, identity, dedupe_key) DO NOTHING`
	// templateStatusSQL records a template's status unless a later one is
	// recorded already (then it changes no row).
	templateStatusSQL = `INSERT INTO template_holds (identity, template, lang, status, since, notice_id) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (identity, template, lang) DO UPDATE SET status = excluded.status, since = excluded.since, notice_id = excluded.notice_id
	WHERE excluded.since >= template_holds.since`
	// holdRowsSQL puts back the identity's queued rows of a template (of
	// that language, or any when the notice names none). It walks the
	// identity's queued rows: a template's status changes seldom.
	holdRowsSQL = `UPDATE messages SET last_error = $1, next_attempt_at = greatest(next_attempt_at, $2)
	WHERE state = 'queued' AND identity = $3 AND payload IS NOT NULL
	AND payload::jsonb->>'template' = $4 AND ($5 = '' OR coalesce(payload::jsonb->>'lang', '') = $5)`
	// releaseRowsSQL's predicate repeats messages_template_held's.
	releaseRowsSQL = `UPDATE messages SET next_attempt_at = $1, last_error = $2
	WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: ' AND identity = $3 AND last_error = $4`
)

// ingestNotices writes an event's notices (deduplicated) and what the new
// ones say (rules.Notice): pauses, template holds and releases.
func (s *Store) ingestNotices(ctx context.Context, tx pgx.Tx, p *store.IngestParams, ev *store.IngestedEvent, received time.Time,
	res *store.IngestResult) error {
	now, err := s.clock(ctx, tx)
	if err != nil {
		return err
	}
	for j := range p.Notices {
		n := p.Notices[j]
		store.PrepareNotice(&n, p.EventID, j, ev)
		id := s.ids.New(now)
		step := rules.Notice(&n, p, now)
		var at *time.Time
		if !step.At.IsZero() {
			at = &step.At
		}
		tag, err := tx.Exec(ctx, insertNoticeSQL, id, n.EventID, n.Provider, n.Identity, n.Kind, n.Field, n.Code, n.Subject, n.Lang,
			n.Value, n.Detail, n.DedupeKey, at, received)
		if err != nil {
			return fmt.Errorf("postgres: ingest notice: %w", err)
		}
		if tag.RowsAffected() != 1 {
			// A redelivery, or this event read again (WebhookRetry).
			var evID string
			if err := tx.QueryRow(ctx, "SELECT event_id FROM notices WHERE provider = $1 AND identity = $2 AND dedupe_key = $3",
				n.Provider, n.Identity, n.DedupeKey).Scan(&evID); err != nil {
				return fmt.Errorf("postgres: ingest notice: %w", err)
			}
			if evID == p.EventID {
				res.Reread++
			} else {
				res.Duplicates++
			}
			continue
		}
		res.Notices++
		if step.Pause {
			if _, err := tx.Exec(ctx, pauseSQL, n.Identity, n.PauseReason, now); err != nil {
				return fmt.Errorf("postgres: ingest notice: pause %s: %w", n.Identity, err)
			}
			res.Paused++
		}
		if t := step.Template; t != nil {
			if err := applyTemplate(ctx, tx, t, id, now, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyTemplate records a template status for each identity it applies
// to and holds or releases the rows of those it changed.
func applyTemplate(ctx context.Context, tx pgx.Tx, t *rules.TemplateStep, noticeID string, now time.Time, res *store.IngestResult) error {
	for _, idn := range t.Identities {
		tag, err := tx.Exec(ctx, templateStatusSQL, idn, t.Template, t.Lang, t.Status, t.Since, noticeID)
		if err != nil {
			return fmt.Errorf("postgres: ingest notice: template status: %w", err)
		}
		if tag.RowsAffected() != 1 {
			continue // a later status is recorded: this one is stale
		}
		if t.Hold {
			tag, err := tx.Exec(ctx, holdRowsSQL, t.Marker, t.HoldUntil, idn, t.Template, t.Lang)
			if err != nil {
				return fmt.Errorf("postgres: ingest notice: hold rows: %w", err)
			}
			res.TemplateHeld += int(tag.RowsAffected())
			continue
		}
		tag, err = tx.Exec(ctx, releaseRowsSQL, now, t.Note, idn, t.Marker)
		if err != nil {
			return fmt.Errorf("postgres: ingest notice: release rows: %w", err)
		}
		res.TemplateReleased += int(tag.RowsAffected())
	}
	return nil
}

const noticeCols = `id, event_id, provider, identity, kind, field, code, subject, lang, value, detail, dedupe_key, at, received_at`

// NoticeList returns notices, newest first.
func (s *Store) NoticeList(ctx context.Context, kind string, limit int) ([]store.Notice, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + noticeCols + " FROM notices ORDER BY received_at DESC, id DESC LIMIT $1"
	args := []any{limit}
	if kind != "" {
		q = "SELECT " + noticeCols + " FROM notices WHERE kind = $2 ORDER BY received_at DESC, id DESC LIMIT $1"
		args = append(args, kind)
	}
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: notices: %w", err)
	}
	defer rs.Close()
	out := []store.Notice{}
	for rs.Next() {
		var (
			n  store.Notice
			at *time.Time
		)
		if err := rs.Scan(&n.ID, &n.EventID, &n.Provider, &n.Identity, &n.Kind, &n.Field, &n.Code, &n.Subject, &n.Lang, &n.Value,
			&n.Detail, &n.DedupeKey, &at, &n.ReceivedAt); err != nil {
			return nil, fmt.Errorf("postgres: notices: %w", err)
		}
		if at != nil {
			n.At = at.UTC()
		}
		n.ReceivedAt = n.ReceivedAt.UTC()
		out = append(out, n)
	}
	return out, rs.Err()
}

// TemplateHolds returns the held templates, with the rows each holds.
func (s *Store) TemplateHolds(ctx context.Context) ([]store.TemplateHold, error) {
	rs, err := s.pool.Query(ctx, `SELECT h.identity, h.template, h.lang, h.status, h.since,
	(SELECT count(*) FROM messages m WHERE m.state = 'queued' AND substr(m.last_error, 1, 15) = 'template hold: '
		AND m.identity = h.identity AND m.last_error = $1 || h.template || ' (' || h.lang || $2)
	FROM template_holds h WHERE h.status IN ('PAUSED', 'DISABLED', 'REJECTED') ORDER BY h.identity, h.template, h.lang`,
		store.TemplateHeldPrefix, templateHeldSuffix)
	if err != nil {
		return nil, fmt.Errorf("postgres: template holds: %w", err)
	}
	defer rs.Close()
	out := []store.TemplateHold{}
	for rs.Next() {
		var h store.TemplateHold
		var held int64
		if err := rs.Scan(&h.Identity, &h.Template, &h.Lang, &h.Status, &h.Since, &held); err != nil {
			return nil, fmt.Errorf("postgres: template holds: %w", err)
		}
		h.Since, h.Held = h.Since.UTC(), int(held)
		out = append(out, h)
	}
	return out, rs.Err()
}

// templateHeldSuffix is what follows "(lang" in store.TemplateHeldError.
var templateHeldSuffix = store.TemplateHeldError("", "")[len(store.TemplateHeldPrefix+" ("):]
