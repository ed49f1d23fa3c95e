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
// ones say (rules.WriteNotice): pauses, template holds and releases.
func (s *Store) ingestNotices(ctx context.Context, tx pgx.Tx, p *store.IngestParams, ev *store.IngestedEvent, received time.Time,
	res *store.IngestResult) error {
	now, err := s.clock(ctx, tx)
	if err != nil {
		return err
	}
	w := &noticeWriter{ctx: ctx, tx: tx, now: now, received: received}
	for j := range p.Notices {
		n := p.Notices[j]
		store.PrepareNotice(&n, p.EventID, j, ev)
		if err := rules.WriteNotice(w, s.ids.New(now), &n, p, now, res); err != nil {
			return err
		}
	}
	return nil
}

// noticeWriter is rules.NoticeWriter in PostgreSQL, in the ingest's
// transaction.
type noticeWriter struct {
	ctx           context.Context
	tx            pgx.Tx
	now, received time.Time
}

func (w *noticeWriter) InsertNotice(id string, n *store.Notice, at time.Time) (bool, error) {
	var atp *time.Time
	if !at.IsZero() {
		atp = &at
	}
	tag, err := w.tx.Exec(w.ctx, insertNoticeSQL, id, n.EventID, n.Provider, n.Identity, n.Kind, n.Field, n.Code, n.Subject, n.Lang,
		n.Value, n.Detail, n.DedupeKey, atp, w.received)
	if err != nil {
		return false, fmt.Errorf("postgres: ingest notice: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (w *noticeWriter) NoticeHeldBy(n *store.Notice) (string, error) {
	var evID string
	if err := w.tx.QueryRow(w.ctx, "SELECT event_id FROM notices WHERE provider = $1 AND identity = $2 AND dedupe_key = $3",
		n.Provider, n.Identity, n.DedupeKey).Scan(&evID); err != nil {
		return "", fmt.Errorf("postgres: ingest notice: %w", err)
	}
	return evID, nil
}

func (w *noticeWriter) Pause(identity, reason string) error {
	if _, err := w.tx.Exec(w.ctx, pauseSQL, identity, reason, w.now); err != nil {
		return fmt.Errorf("postgres: ingest notice: pause %s: %w", identity, err)
	}
	return nil
}

func (w *noticeWriter) TemplateStatus(identity string, t *rules.TemplateStep, noticeID string) (bool, error) {
	tag, err := w.tx.Exec(w.ctx, templateStatusSQL, identity, t.Template, t.Lang, t.Status, t.Since, noticeID)
	if err != nil {
		return false, fmt.Errorf("postgres: ingest notice: template status: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (w *noticeWriter) HoldRows(identity string, t *rules.TemplateStep) (int, error) {
	tag, err := w.tx.Exec(w.ctx, holdRowsSQL, t.Marker, t.HoldUntil, identity, t.Template, t.Lang)
	if err != nil {
		return 0, fmt.Errorf("postgres: ingest notice: hold rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func (w *noticeWriter) ReleaseRows(identity string, t *rules.TemplateStep) (int, error) {
	tag, err := w.tx.Exec(w.ctx, releaseRowsSQL, w.now, t.Note, identity, t.Marker)
	if err != nil {
		return 0, fmt.Errorf("postgres: ingest notice: release rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
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
