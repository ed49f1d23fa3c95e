package sqlite

import (
	"context"
	"database/sql"
	"fmt"

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
// ones say (rules.Notice): pauses, template holds and releases.
func (s *Store) ingestNotices(ctx context.Context, ts *txStmts, p *store.IngestParams, ev *store.IngestedEvent, now, received int64,
	res *store.IngestResult) error {
	for j := range p.Notices {
		n := p.Notices[j]
		store.PrepareNotice(&n, p.EventID, j, ev)
		id := s.ids.New(fromMicros(now))
		step := rules.Notice(&n, p, fromMicros(now))
		r, err := ts.exec(ctx, insertNoticeSQL, id, n.EventID, n.Provider, n.Identity, n.Kind, n.Field, n.Code, n.Subject, n.Lang,
			n.Value, n.Detail, n.DedupeKey, nullMicros(step.At), received)
		if err != nil {
			return fmt.Errorf("sqlite: ingest notice: %w", err)
		}
		if k, _ := r.RowsAffected(); k != 1 {
			// A redelivery, or this event read again (WebhookRetry).
			var evID string
			row, err := ts.queryRow(ctx, "SELECT event_id FROM notices WHERE provider = ? AND identity = ? AND dedupe_key = ?",
				n.Provider, n.Identity, n.DedupeKey)
			if err == nil {
				err = row.Scan(&evID)
			}
			if err != nil {
				return fmt.Errorf("sqlite: ingest notice: %w", err)
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
			if _, err := ts.exec(ctx, pauseSQL, n.Identity, n.PauseReason, now, now); err != nil {
				return fmt.Errorf("sqlite: ingest notice: pause %s: %w", n.Identity, err)
			}
			res.Paused++
		}
		if t := step.Template; t != nil {
			if err := applyTemplate(ctx, ts, t, id, now, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyTemplate records a template status for each identity it applies
// to and holds or releases the rows of those it changed.
func applyTemplate(ctx context.Context, ts *txStmts, t *rules.TemplateStep, noticeID string, now int64, res *store.IngestResult) error {
	for _, idn := range t.Identities {
		r, err := ts.exec(ctx, templateStatusSQL, idn, t.Template, t.Lang, t.Status, micros(t.Since), noticeID)
		if err != nil {
			return fmt.Errorf("sqlite: ingest notice: template status: %w", err)
		}
		if k, _ := r.RowsAffected(); k != 1 {
			continue // a later status is recorded: this one is stale
		}
		if t.Hold {
			r, err := ts.exec(ctx, holdRowsSQL, t.Marker, micros(t.HoldUntil), idn, t.Template, t.Lang, t.Lang)
			if err != nil {
				return fmt.Errorf("sqlite: ingest notice: hold rows: %w", err)
			}
			k, _ := r.RowsAffected()
			res.TemplateHeld += int(k)
			continue
		}
		r, err = ts.exec(ctx, releaseRowsSQL, now, t.Note, idn, t.Marker)
		if err != nil {
			return fmt.Errorf("sqlite: ingest notice: release rows: %w", err)
		}
		k, _ := r.RowsAffected()
		res.TemplateReleased += int(k)
	}
	return nil
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
