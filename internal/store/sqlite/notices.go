package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

const (
	// pauseSQL is IdentityPause's statement.
	pauseSQL = "INSERT INTO identities (name, paused, paused_reason, paused_at, updated_at) VALUES (?, 1, ?, ?, ?) " +
		"ON CONFLICT (name) DO UPDATE SET paused = 1, paused_reason = excluded.paused_reason, " +
		"paused_at = CASE WHEN identities.paused = 1 THEN identities.paused_at ELSE excluded.paused_at END, updated_at = excluded.updated_at"
	insertNoticeSQL = `INSERT INTO notices (id, event_id, provider, identity, kind, field, code, subject, lang, value, detail,
	dedupe_key, at, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (provider, identity, dedupe_key) DO NOTHING`
	// templateStatusSQL records a template's status unless a later one is
	// recorded already (then it changes no row).
	templateStatusSQL = `INSERT INTO template_holds (identity, template, lang, status, since, notice_id) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (identity, template, lang) DO UPDATE SET status = excluded.status, since = excluded.since, notice_id = excluded.notice_id
	WHERE excluded.since >= template_holds.since`
	// holdRowsSQL puts back the identity's queued rows of a template (of
	// that language, or any when the notice names none). It walks the
	// identity's queued rows: a template's status changes seldom.
	holdRowsSQL = `UPDATE messages SET last_error = ?, next_attempt_at = max(next_attempt_at, ?)
	WHERE state = 'queued' AND identity = ? AND payload IS NOT NULL
	AND json_extract(payload, '$.template') = ? AND (? = '' OR coalesce(json_extract(payload, '$.lang'), '') = ?)`
	// releaseRowsSQL makes the rows a hold put back due now; its predicate
	// repeats messages_template_held's literally.
	releaseRowsSQL = `UPDATE messages INDEXED BY messages_template_held SET next_attempt_at = ?, last_error = ?
	WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: ' AND identity = ? AND last_error = ?`
)

// ingestNotices writes an event's notices (deduplicated) and what the new
// ones say (rules.WriteNotice): pauses, template holds and releases.
func (s *Store) ingestNotices(ctx context.Context, ts *txStmts, p *store.IngestParams, ev *store.IngestedEvent, now, received int64,
	res *store.IngestResult) error {
	w := &noticeWriter{ctx: ctx, ts: ts, now: now, received: received}
	for j := range p.Notices {
		n := p.Notices[j]
		store.PrepareNotice(&n, p.EventID, j, ev)
		if err := rules.WriteNotice(w, s.ids.New(fromMicros(now)), &n, p, fromMicros(now), res); err != nil {
			return err
		}
	}
	return nil
}

// noticeWriter is rules.NoticeWriter in SQLite, in the ingest's
// transaction; times are Unix microseconds.
type noticeWriter struct {
	ctx           context.Context
	ts            *txStmts
	now, received int64
}

func (w *noticeWriter) InsertNotice(id string, n *store.Notice, at time.Time) (bool, error) {
	r, err := w.ts.exec(w.ctx, insertNoticeSQL, id, n.EventID, n.Provider, n.Identity, n.Kind, n.Field, n.Code, n.Subject, n.Lang,
		n.Value, n.Detail, n.DedupeKey, nullMicros(at), w.received)
	if err != nil {
		return false, fmt.Errorf("sqlite: ingest notice: %w", err)
	}
	k, _ := r.RowsAffected()
	return k == 1, nil
}

func (w *noticeWriter) NoticeHeldBy(n *store.Notice) (string, error) {
	var evID string
	row, err := w.ts.queryRow(w.ctx, "SELECT event_id FROM notices WHERE provider = ? AND identity = ? AND dedupe_key = ?",
		n.Provider, n.Identity, n.DedupeKey)
	if err == nil {
		err = row.Scan(&evID)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: ingest notice: %w", err)
	}
	return evID, nil
}

func (w *noticeWriter) Pause(identity, reason string) error {
	if _, err := w.ts.exec(w.ctx, pauseSQL, identity, reason, w.now, w.now); err != nil {
		return fmt.Errorf("sqlite: ingest notice: pause %s: %w", identity, err)
	}
	return nil
}

func (w *noticeWriter) TemplateStatus(identity string, t *rules.TemplateStep, noticeID string) (bool, error) {
	r, err := w.ts.exec(w.ctx, templateStatusSQL, identity, t.Template, t.Lang, t.Status, micros(t.Since), noticeID)
	if err != nil {
		return false, fmt.Errorf("sqlite: ingest notice: template status: %w", err)
	}
	k, _ := r.RowsAffected()
	return k == 1, nil
}

func (w *noticeWriter) HoldRows(identity string, t *rules.TemplateStep) (int, error) {
	r, err := w.ts.exec(w.ctx, holdRowsSQL, t.Marker, micros(t.HoldUntil), identity, t.Template, t.Lang, t.Lang)
	if err != nil {
		return 0, fmt.Errorf("sqlite: ingest notice: hold rows: %w", err)
	}
	k, _ := r.RowsAffected()
	return int(k), nil
}

func (w *noticeWriter) ReleaseRows(identity string, t *rules.TemplateStep) (int, error) {
	r, err := w.ts.exec(w.ctx, releaseRowsSQL, w.now, t.Note, identity, t.Marker)
	if err != nil {
		return 0, fmt.Errorf("sqlite: ingest notice: release rows: %w", err)
	}
	k, _ := r.RowsAffected()
	return int(k), nil
}

const noticeCols = `id, event_id, provider, identity, kind, field, code, subject, lang, value, detail, dedupe_key, at, received_at`

// NoticeList returns notices, newest first.
func (s *Store) NoticeList(ctx context.Context, kind string, limit int) ([]store.Notice, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + noticeCols + " FROM notices INDEXED BY notices_received ORDER BY received_at DESC, id DESC LIMIT ?"
	args := []any{limit}
	if kind != "" {
		q = "SELECT " + noticeCols + " FROM notices INDEXED BY notices_kind WHERE kind = ? ORDER BY received_at DESC, id DESC LIMIT ?"
		args = []any{kind, limit}
	}
	rs, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: notices: %w", err)
	}
	defer rs.Close()
	out := []store.Notice{}
	for rs.Next() {
		var (
			n        store.Notice
			at       sql.NullInt64
			received int64
		)
		if err := rs.Scan(&n.ID, &n.EventID, &n.Provider, &n.Identity, &n.Kind, &n.Field, &n.Code, &n.Subject, &n.Lang, &n.Value,
			&n.Detail, &n.DedupeKey, &at, &received); err != nil {
			return nil, fmt.Errorf("sqlite: notices: %w", err)
		}
		if at.Valid {
			n.At = fromMicros(at.Int64)
		}
		n.ReceivedAt = fromMicros(received)
		out = append(out, n)
	}
	return out, rs.Err()
}

// TemplateHolds returns the held templates, with the rows each holds.
func (s *Store) TemplateHolds(ctx context.Context) ([]store.TemplateHold, error) {
	rs, err := s.r.QueryContext(ctx, `SELECT h.identity, h.template, h.lang, h.status, h.since,
	(SELECT count(*) FROM messages m INDEXED BY messages_template_held WHERE m.state = 'queued'
		AND substr(m.last_error, 1, 15) = 'template hold: ' AND m.identity = h.identity AND m.last_error = ?
		|| h.template || ' (' || h.lang || ?)
	FROM template_holds h WHERE h.status IN ('PAUSED', 'DISABLED', 'REJECTED') ORDER BY h.identity, h.template, h.lang`,
		store.TemplateHeldPrefix, templateHeldSuffix)
	if err != nil {
		return nil, fmt.Errorf("sqlite: template holds: %w", err)
	}
	defer rs.Close()
	out := []store.TemplateHold{}
	for rs.Next() {
		var (
			h     store.TemplateHold
			since int64
		)
		if err := rs.Scan(&h.Identity, &h.Template, &h.Lang, &h.Status, &since, &h.Held); err != nil {
			return nil, fmt.Errorf("sqlite: template holds: %w", err)
		}
		h.Since = fromMicros(since)
		out = append(out, h)
	}
	return out, rs.Err()
}

// templateHeldSuffix is what follows "(lang" in store.TemplateHeldError.
var templateHeldSuffix = store.TemplateHeldError("", "")[len(store.TemplateHeldPrefix+" ("):]
