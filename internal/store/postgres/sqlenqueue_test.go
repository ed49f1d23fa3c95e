package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// sqlApp is an application's own connection: the server's default
// search_path, so enqueue() is called schema-qualified, as documented.
type sqlApp struct {
	conn   *pgx.Conn
	schema string
}

func newSQLApp(t *testing.T) (*handle, *sqlApp) {
	t.Helper()
	url := testURL(t)
	schema := freshSchema(t, url)
	h := open(t, url, schema, Options{})
	if err := h.SQLIdentitiesRecord(context.Background(), []store.SQLIdentity{
		{Name: "sim", Channels: []string{"whatsapp", "sms"}, Default: true},
		{Name: "mail", Channels: []string{"email"}},
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return h, &sqlApp{conn, schema}
}

// enqueue calls enqueue(args) in q (the app's connection or a transaction
// of it); args are "name => value" pairs, values as SQL parameters.
func (a *sqlApp) enqueue(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, args ...any) (string, error) {
	var named []string
	var vals []any
	for i := 0; i < len(args); i += 2 {
		vals = append(vals, args[i+1])
		named = append(named, fmt.Sprintf("%s => $%d", args[i], len(vals)))
	}
	var id string
	err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s.enqueue(%s)", pgx.Identifier{a.schema}.Sanitize(), strings.Join(named, ", ")), vals...).Scan(&id)
	return id, err
}

func count(t *testing.T, h *handle, table string) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSQLEnqueueExistsIffTheTransactionCommits: a committed enqueue() is
// the row msgq send makes of the same send (same body hash, payload and
// first history row), announced to listening drains, and claimed like
// any other; a rolled-back one leaves nothing.
func TestSQLEnqueueExistsIffTheTransactionCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	wake, err := h.Enqueued(ctx)
	if err != nil {
		t.Fatal(err)
	}

	tx, err := app.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := app.enqueue(ctx, tx, "key", "order-1001", "to_addr", "+1 (555) 123-4567", "template", "order_update",
		"params", []string{"Ada", "1001 <&>"}, "purpose", "shipping", "ref", "order:1001")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.MessageGet(ctx, "", id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before commit the row is visible to others: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wake, "after the application's transaction committed")

	got, err := h.MessageGet(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	p := storetest.Params("order-1001-go")
	p.Payload.Params = []string{"Ada", "1001 <&>"}
	p.Purpose, p.TriggerRef = "shipping", "order:1001"
	res, err := h.MessageEnqueue(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	want := res.Message
	if got.BodyHash != want.BodyHash || got.To != want.To || got.Channel != want.Channel || got.Identity != want.Identity ||
		got.Tenant != want.Tenant || got.Lane != want.Lane || got.Purpose != want.Purpose || got.TriggerRef != want.TriggerRef ||
		!reflect.DeepEqual(got.Payload, want.Payload) || got.State != state.Queued || got.ExpiresAt != nil || len(got.ID) != len(want.ID) {
		t.Fatalf("enqueue() wrote\n%+v\nmsgq send writes\n%+v", got, want)
	}
	var rawSQL, rawGo string
	if err := h.pool.QueryRow(ctx, "SELECT (SELECT payload FROM messages WHERE id = $1), (SELECT payload FROM messages WHERE id = $2)", id, want.ID).Scan(&rawSQL, &rawGo); err != nil {
		t.Fatal(err)
	}
	if rawSQL != rawGo {
		t.Fatalf("payload column: enqueue() %s, msgq send %s", rawSQL, rawGo)
	}
	hs, err := h.MessageHistory(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hg, err := h.MessageHistory(ctx, want.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || len(hg) != 1 {
		t.Fatalf("history: enqueue() %d rows, msgq send %d", len(hs), len(hg))
	}
	hs[0].MessageID, hs[0].At, hg[0].MessageID, hg[0].At = "", time.Time{}, "", time.Time{}
	if !reflect.DeepEqual(hs[0], hg[0]) {
		t.Fatalf("history: enqueue() %+v, msgq send %+v", hs[0], hg[0])
	}

	cl, err := h.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, c := range cl {
		claimed = append(claimed, c.ID)
	}
	if len(claimed) != 2 || (claimed[0] != id && claimed[1] != id) {
		t.Fatalf("a drain claimed %v; want both rows, %s among them", claimed, id)
	}

	tx, err = app.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := app.enqueue(ctx, tx, "key", "order-1002", "to_addr", "+15551234567", "text", "never sent")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.MessageGet(ctx, "", gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back enqueue left message %s: %v", gone, err)
	}
	if _, err := h.MessageGet(ctx, "", "order-1002"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back enqueue left its key: %v", err)
	}
}

// TestSQLEnqueueReplaysAndConflicts: the same key with the same content is
// the existing message, whichever path wrote it (msgq send or enqueue());
// other content raises MQ409 with the existing id as DETAIL, and writes
// nothing.
func TestSQLEnqueueReplaysAndConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	first, err := app.enqueue(ctx, app.conn, "key", "k1", "to_addr", "+15551234567", "text", "hello \"Ada\"\n\tline 2 \u2028 é")
	if err != nil {
		t.Fatal(err)
	}
	again, err := app.enqueue(ctx, app.conn, "key", "k1", "to_addr", "+1 555 123 4567", "text", "hello \"Ada\"\n\tline 2 \u2028 é",
		"purpose", "not content", "lane", "reply")
	if err != nil || again != first {
		t.Fatalf("replay: %q, %v; want %s", again, err, first)
	}
	res, err := h.MessageEnqueue(ctx, &store.EnqueueParams{Key: "k1", To: "+15551234567", Channel: "whatsapp", Identity: "sim",
		Payload: store.Payload{Text: "hello \"Ada\"\n\tline 2 \u2028 é"}})
	if err != nil || !res.Replayed || res.Message.ID != first {
		t.Fatalf("msgq send of the same send: %+v, %v; want a replay of %s", res, err, first)
	}
	p := storetest.Params("k2")
	res, err = h.MessageEnqueue(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	byGo, err := app.enqueue(ctx, app.conn, "key", "k2", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1001"})
	if err != nil || byGo != res.Message.ID {
		t.Fatalf("enqueue() of a send msgq send made: %q, %v; want %s", byGo, err, res.Message.ID)
	}
	messages, history := count(t, h, "messages"), count(t, h, "history")

	_, err = app.enqueue(ctx, app.conn, "key", "k1", "to_addr", "+15551234567", "text", "other content")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "MQ409" || pe.Detail != first || pe.ColumnName != "key" {
		t.Fatalf("conflict: %v (%+v); want SQLSTATE MQ409 with DETAIL %s", err, pe, first)
	}
	if !strings.Contains(pe.Message, first) {
		t.Fatalf("conflict message %q does not name %s", pe.Message, first)
	}
	if m, h2 := count(t, h, "messages"), count(t, h, "history"); m != messages || h2 != history {
		t.Fatalf("a conflict wrote rows: messages %d -> %d, history %d -> %d", messages, m, history, h2)
	}
}

// TestSQLEnqueueRefusesBadInputAsTheCLIDoes: each invalid send raises
// MQ422 naming the field (in the message and as the error's column) and
// writes nothing.
func TestSQLEnqueueRefusesBadInputAsTheCLIDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	ok := []any{"to_addr", "+15551234567", "text", "hi"}
	cases := []struct {
		name, field string
		args        []any
	}{
		{"no key", "key", append([]any{"key", ""}, ok...)},
		{"a key outside the grammar", "key", append([]any{"key", "order 1001"}, ok...)},
		{"a key too long", "key", append([]any{"key", strings.Repeat("k", 65)}, ok...)},
		{"no address", "to", []any{"key", "k", "to_addr", "", "text", "hi"}},
		{"a number too short", "to", []any{"key", "k", "to_addr", "+1555", "text", "hi"}},
		{"a local number without a region", "to", []any{"key", "k", "to_addr", "555 123 4567", "text", "hi"}},
		{"a number with two letters too few for a vanity number", "to", []any{"key", "k", "to_addr", "+1 80 FL", "text", "hi"}},
		{"a number in Devanagari digits (read by msgq send only)", "to", []any{"key", "k", "to_addr", "+1 555 123 \u096a\u096b\u096c\u096d", "text", "hi"}},
		{"a tel: URI with an invalid phone-context", "to", []any{"key", "k", "to_addr", "tel:555-1234;phone-context=ex_ample.com", "region", "US", "text", "hi"}},
		{"a tel: URI with an empty phone-context", "to", []any{"key", "k", "to_addr", "tel:555-1234;phone-context=", "region", "US", "text", "hi"}},
		{"an unknown identity", "identity", append([]any{"key", "k", "identity", "nobody"}, ok...)},
		{"a channel the identity does not send on", "channel", append([]any{"key", "k", "channel", "email"}, ok...)},
		{"an unknown channel", "channel", append([]any{"key", "k", "channel", "pigeon"}, ok...)},
		{"text and a template", "text", []any{"key", "k", "to_addr", "+15551234567", "text", "hi", "template", "t"}},
		{"neither text nor template", "payload", []any{"key", "k", "to_addr", "+15551234567"}},
		{"blank text", "text", []any{"key", "k", "to_addr", "+15551234567", "text", " \t\n"}},
		{"text with parameters", "text", append([]any{"key", "k", "params", []string{"x"}}, ok...)},
		{"a fallback template without text", "fallback_template", []any{"key", "k", "to_addr", "+15551234567", "template", "t", "fallback_template", "f"}},
		{"a subject off email", "subject", append([]any{"key", "k", "subject", "Hi"}, ok...)},
		{"an email template", "template", []any{"key", "k", "identity", "mail", "to_addr", "ada@example.com", "template", "welcome"}},
		{"an email without a subject", "subject", []any{"key", "k", "identity", "mail", "to_addr", "ada@example.com", "text", "hi"}},
		{"a subject of two lines", "subject", []any{"key", "k", "identity", "mail", "to_addr", "ada@example.com", "text", "hi", "subject", "a\nb"}},
		{"an email address whose quoted local part is not a plain one (msgq send refuses it too)", "to", []any{"key", "k", "identity", "mail", "to_addr", `"ada lovelace"@example.com`, "text", "hi", "subject", "s"}},
		{"an email address with a comment (read by msgq send only)", "to", []any{"key", "k", "identity", "mail", "to_addr", "ada@example.com (Ada)", "text", "hi", "subject", "s"}},
		{"an email address with an IDNA domain (read by msgq send only)", "to", []any{"key", "k", "identity", "mail", "to_addr", "Ada <ada@bücher.example>", "text", "hi", "subject", "s"}},
		{"an email address without a domain", "to", []any{"key", "k", "identity", "mail", "to_addr", "ada@localhost", "text", "hi", "subject", "s"}},
		{"a bad lane", "lane", append([]any{"key", "k", "lane", "fast"}, ok...)},
		{"a bad tenant", "tenant", append([]any{"key", "k", "tenant", "a b"}, ok...)},
		{"an expiry in the past", "expires_at", append([]any{"key", "k", "expires_at", time.Now().Add(-time.Hour)}, ok...)},
		{"a negative expires_in", "expires_in", append([]any{"key", "k", "expires_in", -time.Minute}, ok...)},
		{"both expiries", "expires_in", append([]any{"key", "k", "expires_in", time.Minute, "expires_at", time.Now().Add(time.Hour)}, ok...)},
		{"both not_befores", "not_before", append([]any{"key", "k", "not_before_in", time.Minute, "not_before", time.Now().Add(time.Hour)}, ok...)},
		{"an expiry before not_before", "expires_at", append([]any{"key", "k", "not_before_in", time.Hour, "expires_in", time.Minute}, ok...)},
	}
	for _, c := range cases {
		_, err := app.enqueue(ctx, app.conn, c.args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "MQ422" || pe.ColumnName != c.field || !strings.HasPrefix(pe.Message, "msgq: "+c.field+" ") {
			t.Errorf("%s: %v; want SQLSTATE MQ422 naming %s", c.name, err, c.field)
		}
	}
	if n := count(t, h, "messages") + count(t, h, "history"); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
	// And the good ones around them: a local number with its region, an
	// email with text and subject, an exact delay.
	// A vanity number with an extension, read as msgq send reads it.
	vanity, err := app.enqueue(ctx, app.conn, "key", "vanity", "to_addr", "+1 800 FLOWERS ext. 89", "text", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := h.MessageGet(ctx, "", vanity); err != nil || m.To != "+18003569377" {
		t.Fatalf("vanity number: %+v, %v; want +18003569377", m, err)
	}
	// Beyond ASCII (full-width digits and plus, Arabic-Indic digits, a
	// no-break space, a full-width extension) and an RFC 3966 URI whose
	// phone-context gives the country and area code. (A full-width plus
	// is read as a plus, yet msgq send asks for a region unless the
	// number starts with an ASCII one: so does enqueue().)
	for i, c := range [][3]string{{"\uff0b\uff11\u00a0\uff15\uff15\uff15\u2010\u0661\u0662\u0663\u2010\u0664\u0665\u0666\u0667 \uff45\uff58\uff54 9", "US", "+15551234567"},
		{"tel:555-1234;phone-context=+1-212", "US", "+12125551234"}} {
		id, err := app.enqueue(ctx, app.conn, "key", fmt.Sprint("unicode-", i), "to_addr", c[0], "region", c[1], "text", "hi")
		if err != nil {
			t.Fatalf("%q: %v", c[0], err)
		}
		if m, err := h.MessageGet(ctx, "", id); err != nil || m.To != c[2] {
			t.Fatalf("%q: %+v, %v; want %s", c[0], m, err, c[2])
		}
	}
	id, err := app.enqueue(ctx, app.conn, "key", "local", "to_addr", "(555) 123-4567", "region", "us", "text", "hi", "not_before_in", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.MessageGet(ctx, "", id)
	if err != nil || m.To != "+15551234567" || m.NextAttemptAt.Sub(m.CreatedAt) != 48*time.Hour {
		t.Fatalf("local number: %+v, %v; want +15551234567, due 48h after creation", m, err)
	}
	id, err = app.enqueue(ctx, app.conn, "key", "mail", "identity", "mail", "to_addr", " Ada.Lovelace@Example.COM ", "text", "hi", "subject", "Hello")
	if err != nil {
		t.Fatal(err)
	}
	if m, err = h.MessageGet(ctx, "", id); err != nil || m.To != "Ada.Lovelace@example.com" || m.Channel != "email" || m.Payload.Subject != "Hello" {
		t.Fatalf("email: %+v, %v", m, err)
	}
	id, err = app.enqueue(ctx, app.conn, "key", "mail-named", "identity", "mail", "to_addr", `"Lovelace, Ada" <"ada.lovelace"@Example.COM>`, "text", "hi", "subject", "Hello")
	if err != nil {
		t.Fatal(err)
	}
	if m, err = h.MessageGet(ctx, "", id); err != nil || m.To != "ada.lovelace@example.com" {
		t.Fatalf("email with a display name and a quoted local part: %+v, %v; want what recipient.Normalize gives, ada.lovelace@example.com", m, err)
	}
}

// TestSQLNormalizesEmailLikeRecipient: what normalize_email accepts,
// recipient.Normalize accepts with the same result; an address of a form
// SQL reads (bare, or after a display name in angle brackets, its local
// part a dot-atom or a quoted string, an ASCII host name) that the CLI
// accepts, SQL accepts.
func TestSQLNormalizesEmailLikeRecipient(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	h := open(t, url, freshSchema(t, url), Options{})
	atom := rapid.StringOfN(rapid.RuneFrom([]rune("abcXYZ019!#$%&'*+/=?^_`{|}~-")), 1, 8, -1)
	label := rapid.StringMatching(`[a-zA-Z0-9]([a-zA-Z0-9-]{0,6}[a-zA-Z0-9])?`)
	wrapped := 0 // display names and quoted local parts read by both
	rapid.Check(t, func(t *rapid.T) {
		for range 20 {
			local := atom.Draw(t, "local")
			if rapid.Bool().Draw(t, "dotted") {
				local += "." + atom.Draw(t, "local2")
			}
			domain := label.Draw(t, "label") + "." + label.Draw(t, "tld")
			plain := !strings.Contains(domain, "--")
			raw := local + "@" + domain
			// plain: a form SQL reads, so it must accept what the CLI accepts.
			name := rapid.SampledFrom([]string{"Ada", "Ada Lovelace", `"Ada Lovelace"`, `"Lovelace, Ada"`, `"A \"B\" C"`, "Zoë",
				`"Zoë Ö"`, "Ada.L", ".Ada.", `Ada "L"`, `"Ada"Lovelace`, " \t", "A\tB", `"a\\b"`, "=?utf-8?q?Ada?=", "Ada (c)",
				`"unclosed`, "a@b", "Ada:", "A<B"}).Draw(t, "name")
			// Encoded words, comments and groups are refused in SQL.
			sqlName := !strings.ContainsAny(name, "=(:")
			quoted := `"` + rapid.StringOfN(rapid.RuneFrom([]rune("ab Z.@,:;<>()[]\\\"\t!~")), 0, 6, -1).Draw(t, "qlocal") + `"`
			switch rapid.IntRange(0, 15).Draw(t, "form") {
			case 1:
				raw, plain = name+" <"+raw+">", plain && sqlName
			case 2:
				raw = quoted + "@" + domain
			case 3:
				raw, plain = local+"@bücher.example", false
			case 4:
				raw, plain = local+"@"+label.Draw(t, "single"), false
			case 5:
				raw, plain = local+"@[192.0.2.1]", false
			case 6:
				raw = "  " + raw + "\t"
			case 7:
				raw, plain = local+"..x@"+domain, false
			case 8:
				raw = "<" + raw + ">"
			case 9:
				plain = plain && sqlName
				raw = name + rapid.SampledFrom([]string{"<", "\t<", "  < ", "< \t"}).Draw(t, "open") + quoted + "@ " + domain + ">" +
					rapid.SampledFrom([]string{"", " ", "\t "}).Draw(t, "after")
			case 10:
				raw = local + "@ \t" + domain + " "
			case 11:
				raw, plain = name+" <"+raw+" >", false
			case 12:
				raw, plain = raw+" (Ada)", false
			case 13:
				raw, plain = "Team: "+raw+";", false
			case 14:
				raw = name + " <zoë" + rapid.SampledFrom([]string{"", "\u00a0x", ".\u4e2d\u6587", "\U0001f600"}).Draw(t, "mb") + "@" + domain + ">"
				plain = plain && sqlName
			case 15:
				raw = `"` + local + "\u00e9" + `"@` + domain
			}
			// What msgq send stores: recipient.Normalize's address, which
			// store.EnqueueParams.Validate then requires to read back as
			// itself (recipient.Valid).
			want, goErr := recipient.Normalize(recipient.Email, raw, "")
			if goErr == nil {
				goErr = recipient.Valid(recipient.Email, want)
			}
			got, ok := sqlNormalize(t, h, recipient.Email, raw, "")
			if ok && (strings.Contains(raw, "<") || strings.HasPrefix(raw, `"`)) {
				wrapped++
			}
			switch {
			case ok && goErr != nil:
				t.Fatalf("%q: SQL reads %s, recipient refuses: %v", raw, got, goErr)
			case ok && got != want:
				t.Fatalf("%q: SQL reads %s, recipient %s", raw, got, want)
			case plain && !ok && goErr == nil:
				t.Fatalf("%q: an address of a form SQL reads, refused by SQL: %s (recipient: %q)", raw, got, want)
			}
		}
	})
	t.Logf("%d addresses with a display name or a quoted local part read by both", wrapped)
	if wrapped == 0 {
		t.Fatal("no address with a display name or a quoted local part was read: the generator must produce them")
	}
}

// TestMigrateReloadsPhoneMetadataOfAnotherBuild: a schema whose
// phone_metadata came from an older phonenumbers release is loaded again
// by Migrate, though no migration is pending; a newer release's is kept.
func TestMigrateReloadsPhoneMetadataOfAnotherBuild(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{})
	// A newer release's metadata is kept.
	if _, err := h.pool.Exec(ctx, "UPDATE phone_metadata_version SET library = 'v999.0.0', hash = 'a newer build'"); err != nil {
		t.Fatal(err)
	}
	if ok, err := phoneMetadataCurrent(ctx, h.pool); err != nil || !ok {
		t.Fatalf("a newer release's metadata: current %v, %v; want kept", ok, err)
	}
	for _, q := range []string{"UPDATE phone_metadata_version SET library = 'v1.0.0', hash = 'an older build'", "DELETE FROM phone_metadata WHERE region = 'GB'"} {
		if _, err := h.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := h.Migrate(ctx)
	if err != nil || len(applied) != 0 {
		t.Fatalf("migrate: %v, %v; want no migration applied", applied, err)
	}
	var e164 *string
	if err := h.pool.QueryRow(ctx, "SELECT e164 FROM normalize_phone('020 7946 0958', 'GB')").Scan(&e164); err != nil || e164 == nil || *e164 != "+442079460958" {
		t.Fatalf("a GB number after the reload: %v, %v", e164, err)
	}
	if ok, err := phoneMetadataCurrent(ctx, h.pool); err != nil || !ok {
		t.Fatalf("phone metadata current after migrate: %v, %v", ok, err)
	}
}

// TestSQLEnqueueConcurrentSameKey: two applications' transactions enqueue
// one key; the second waits for the first and, once it commits, is its
// replay; had it rolled back, the second's row stands alone.
func TestSQLEnqueueConcurrentSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, app := newSQLApp(t)
	other, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(ctx) })
	for _, commitFirst := range []bool{true, false} {
		key := fmt.Sprintf("race-%t", commitFirst)
		tx1, err := app.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, err := app.enqueue(ctx, tx1, "key", key, "to_addr", "+15551234567", "text", "hi")
		if err != nil {
			t.Fatal(err)
		}
		type answer struct {
			id  string
			err error
		}
		second := make(chan answer, 1)
		go func() {
			id, err := app.enqueue(ctx, other, "key", key, "to_addr", "+15551234567", "text", "hi")
			second <- answer{id, err}
		}()
		// The second blocks on the first's uncommitted key until it ends.
		waitLockWait(t, app.conn, other.PgConn().PID())
		if commitFirst {
			err = tx1.Commit(ctx)
		} else {
			err = tx1.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		a := <-second
		switch {
		case a.err != nil:
			t.Fatalf("commit first %t: the second enqueue: %v", commitFirst, a.err)
		case commitFirst && a.id != first:
			t.Fatalf("after the first committed, the second got %s; want its replay %s", a.id, first)
		case !commitFirst && a.id == first:
			t.Fatalf("after the first rolled back, the second got its id %s", a.id)
		}
	}
}

// waitLockWait waits until backend pid waits on a lock (the second
// enqueue on the first's key), with a generous bound against a hang. The
// assertions hold either way; this makes the test race the two.
func waitLockWait(t *testing.T, conn *pgx.Conn, pid uint32) {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; {
		var n int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the second enqueue never waited for the first")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSQLEnqueueRevivesAnOptOutRefusal: as msgq send, a replay through
// enqueue() of a row the drain refused for an opt-out before any call
// replays the refusal while the recipient is opted out, and revives the
// row (queued again, scheduled as this send says, a revive history row,
// the drains woken) once they are not; a replay after that is a replay
// of the revived row. A row that made a call is never revived.
func TestSQLEnqueueRevivesAnOptOutRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	const who = "+15551234567"
	optOut := func(out bool) {
		t.Helper()
		if _, err := h.SetOptOut(ctx, store.OptOutParams{Identity: "sim", Recipient: who, OptedOut: out, Source: "operator"}); err != nil {
			t.Fatal(err)
		}
	}
	// refuse claims the row and fails it as the drain does for an
	// opt-out: opted_out, the attempt given back (call false), or after
	// a call that failed (call true).
	refuse := func(id string, call bool) {
		t.Helper()
		cs, err := h.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1})
		if err != nil || len(cs) != 1 || cs[0].ID != id {
			t.Fatalf("claimed %+v, %v; want %s", cs, err, id)
		}
		if _, err := h.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sending, LeaseOwner: "drain-1",
			Event: state.Event{Kind: state.Fail, Reason: state.OptedOut}, NoCall: !call, Source: store.SourceDrain,
			Detail: "refused", LastError: "the recipient opted out"}); err != nil {
			t.Fatal(err)
		}
	}
	optOut(true)
	args := []any{"key", "rev-1", "to_addr", who, "text", "hi"}
	id, err := app.enqueue(ctx, app.conn, args...)
	if err != nil {
		t.Fatal(err)
	}
	refuse(id, false)
	again, err := app.enqueue(ctx, app.conn, args...)
	if m, _ := h.MessageGet(ctx, "", id); err != nil || again != id || m.State != state.Failed {
		t.Fatalf("while opted out: %q, %v, row %+v; want a replay of the refusal", again, err, m)
	}

	optOut(false)
	wake, err := h.Enqueued(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	rev, err := app.enqueue(ctx, app.conn, append(args, "not_before_in", 5*time.Minute, "expires_in", time.Hour)...)
	if err != nil || rev != id {
		t.Fatalf("after the opt-in: %q, %v; want %s revived", rev, err, id)
	}
	m, err := h.MessageGet(ctx, "", id)
	if err != nil || m.State != state.Queued || m.Reason != state.NoReason || m.LastError != "" || m.Attempts != 0 ||
		m.NextAttemptAt.Before(before.Add(5*time.Minute-time.Second)) || m.ExpiresAt == nil || m.ExpiresAt.Before(before.Add(time.Hour-time.Second)) {
		t.Fatalf("revived row %+v, %v; want queued, due in 5m, expiring in 1h", m, err)
	}
	hist, err := h.MessageHistory(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	if len(hist) != 4 || last.From != state.Failed || last.To != state.Queued || last.Event != "revive(opted_out)" ||
		!last.Applied || last.Source != store.SourceSend || !strings.Contains(last.Detail, "no longer opted out of sim") {
		t.Fatalf("history %+v, want a revive entry last", hist)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("the revival did not wake the drains")
	}
	if again, err := app.enqueue(ctx, app.conn, args...); err != nil || again != id {
		t.Fatalf("a replay of the revived row: %q, %v", again, err)
	}
	if hist, _ := h.MessageHistory(ctx, id); len(hist) != 4 {
		t.Fatalf("the replay of the revived row wrote history: %+v", hist)
	}
	if n := count(t, h, "messages"); n != 1 {
		t.Fatalf("%d rows, want the one revived", n)
	}

	// A refusal after a provider call is a replay, opted in or not.
	called, err := app.enqueue(ctx, app.conn, "key", "rev-2", "to_addr", "+15551234599", "text", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, "UPDATE messages SET next_attempt_at = now() - interval '1 hour' WHERE id = $1", called); err != nil {
		t.Fatal(err)
	}
	refuse(called, true)
	if again, err := app.enqueue(ctx, app.conn, "key", "rev-2", "to_addr", "+15551234599", "text", "hi"); err != nil || again != called {
		t.Fatalf("replay of a refusal after a call: %q, %v", again, err)
	}
	if m, _ := h.MessageGet(ctx, "", called); m.State != state.Failed {
		t.Fatalf("a refusal after a call was revived: %+v", m)
	}
}

// TestSQLEnqueueTakesQuietHoursOff: a send's quiet_hours 'off' is written
// as msgq send writes it (the same payload bytes, and a body hash without
// it, so a send with it and one without are replays of each other); a
// window, read in a time zone the database does not know, is refused, as
// anything else is.
func TestSQLEnqueueTakesQuietHoursOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	id, err := app.enqueue(ctx, app.conn, "key", "quiet-off", "to_addr", "+15551234567", "template", "order_update",
		"params", []string{"Ada", "1001"}, "quiet_hours", "off")
	if err != nil {
		t.Fatal(err)
	}
	p := storetest.Params("quiet-off-go")
	p.Payload.QuietHours = "off"
	res, err := h.MessageEnqueue(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.MessageGet(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.BodyHash != res.Message.BodyHash || got.Payload.QuietHours != "off" || !reflect.DeepEqual(got.Payload, res.Message.Payload) {
		t.Fatalf("enqueue() wrote\n%+v\nmsgq send writes\n%+v", got, res.Message)
	}
	var rawSQL, rawGo string
	if err := h.pool.QueryRow(ctx, "SELECT (SELECT payload FROM messages WHERE id = $1), (SELECT payload FROM messages WHERE id = $2)", id, res.Message.ID).Scan(&rawSQL, &rawGo); err != nil {
		t.Fatal(err)
	}
	if rawSQL != rawGo {
		t.Fatalf("payload column: enqueue() %s, msgq send %s", rawSQL, rawGo)
	}
	// quiet_hours is not content: the same send without it is a replay.
	again, err := app.enqueue(ctx, app.conn, "key", "quiet-off", "to_addr", "+15551234567", "template", "order_update",
		"params", []string{"Ada", "1001"})
	if err != nil || again != id {
		t.Fatalf("the same send without quiet_hours: %q, %v; want the replay %s", again, err, id)
	}
	before := count(t, h, "messages")
	// A window is read in the recipient's zone (0020): this US number
	// spans several and sim has no quiet_zone, so it is refused, as msgq
	// send refuses it (sqlenqueue_quiet_test.go has the rest).
	for _, qh := range []string{"21:00-08:00", "OFF", "on", "25:00-08:00"} {
		_, err := app.enqueue(ctx, app.conn, "key", "quiet-bad", "to_addr", "+15551234567", "text", "hi", "quiet_hours", qh)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "MQ422" || pe.ColumnName != "quiet_hours" || !strings.HasPrefix(pe.Message, "msgq: quiet_hours ") {
			t.Errorf("quiet_hours %q: %v; want SQLSTATE MQ422 naming quiet_hours", qh, err)
		}
	}
	if n := count(t, h, "messages"); n != before {
		t.Fatalf("refused quiet hours wrote %d rows", n-before)
	}
}
