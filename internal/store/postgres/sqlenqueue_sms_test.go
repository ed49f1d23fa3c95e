package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/sms"
	"github.com/msgq/msgq/internal/store"
)

// smsText draws a text as msgq send might get one: GSM-7's basic
// alphabet, its extension table (two septets), characters outside it
// (UCS-2) and emoji (surrogate pairs), in runs around the segment sizes.
func smsText(t *rapid.T) string {
	classes := [][]string{
		strings.Split("abcXYZ019 .,!?@£$¥èéùìòÇØøÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ\"#¤%&'()*+-/:;<=>¡ÄÖÑÜ§¿äöñüà\n\r", ""),
		strings.Split("€[]{}^~|\\\f", ""),
		strings.Split("çáłżЖжשלוםक中文ー\u00a0\u200b\u2028é\u0301", ""),
		{"😀", "👍🏽", "🇮🇱", "𝄞", "👨‍👩‍👧"},
	}
	// Mostly one class, with a few of the others: the counts at the
	// boundaries (67/70, 153/160 and their multiples) are where they differ.
	main := rapid.SampledFrom([]int{0, 0, 1, 2, 3}).Draw(t, "main")
	mix := rapid.IntRange(-len(classes), len(classes)-1).Draw(t, "mix") // negative: none
	n := rapid.SampledFrom([]int{0, 1, 2, 66, 67, 68, 69, 70, 71, 72, 133, 134, 135, 152, 153, 154, 159, 160, 161, 201, 305, 306, 307, 459, 460, 461}).Draw(t, "n")
	n += rapid.IntRange(-2, 2).Draw(t, "jitter")
	var b strings.Builder
	for i := 0; i < n; i++ {
		c := main
		if mix >= 0 && rapid.IntRange(0, 40).Draw(t, "other?") == 0 {
			c = mix
		}
		b.WriteString(rapid.SampledFrom(classes[c]).Draw(t, "char"))
	}
	return b.String()
}

// TestSQLCountsSMSSegmentsLikeTheCLI: sms_segments, which enqueue()
// checks max_segments with, gives internal/sms.Segments' count and
// encoding for the same text.
func TestSQLCountsSMSSegmentsLikeTheCLI(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	h := open(t, url, freshSchema(t, url), Options{})
	seen := map[string]bool{}
	rapid.Check(t, func(t *rapid.T) {
		// Ten texts a check: 1,000 in a default run.
		for range 10 {
			text := smsText(t)
			wantN, wantEnc := sms.Segments(text)
			var gotN int
			var gotEnc string
			if err := h.pool.QueryRow(context.Background(), "SELECT segments, encoding FROM sms_segments($1)", text).Scan(&gotN, &gotEnc); err != nil {
				t.Fatal(err)
			}
			if gotN != wantN || gotEnc != wantEnc {
				t.Fatalf("%q (%d characters): SQL counts %d segments of %s, internal/sms %d of %s", text, len([]rune(text)), gotN, gotEnc, wantN, wantEnc)
			}
			seen[fmt.Sprintf("%s/%d", wantEnc, min(wantN, 4))] = true
		}
	})
	// Both encodings, one and several segments, or the comparison proves little.
	for _, k := range []string{"GSM-7/1", "GSM-7/2", "GSM-7/3", "UCS-2/1", "UCS-2/2", "UCS-2/3"} {
		if !seen[k] {
			t.Errorf("no text of %s segments was drawn (drew %v)", k, seen)
		}
	}
}

// TestSQLEnqueueRefusesTextOverMaxSegments: an SMS text of more segments
// than the identity's max_segments (recorded by msgq migrate) is refused
// with MQ422 naming text, in msgq send's words; one within it, or on
// another channel, is written.
func TestSQLEnqueueRefusesTextOverMaxSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	if err := h.SQLIdentitiesRecord(ctx, []store.SQLIdentity{{Name: "capped", Channels: []string{"sms", "whatsapp"}, MaxSegments: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := h.SQLIdentitiesRecord(ctx, []store.SQLIdentity{{Name: "bad", Channels: []string{"sms"}, MaxSegments: -1}}); err == nil {
		t.Fatal("a negative max_segments was recorded")
	}
	for i, c := range []struct {
		text, channel string
		ok            bool
	}{
		{strings.Repeat("a", 306), "sms", true},
		{strings.Repeat("a", 307), "sms", false},
		{strings.Repeat("a", 300) + "€€€€", "sms", false}, // 308 septets
		{strings.Repeat("é", 134), "sms", true},           // GSM-7: é is in the alphabet
		{strings.Repeat("ç", 134), "sms", true},           // UCS-2: 2 of 67
		{strings.Repeat("ç", 135), "sms", false},
		{strings.Repeat("😀", 67), "sms", false}, // 134 units in segments of 66
		{strings.Repeat("a", 1000), "whatsapp", true},
	} {
		key := fmt.Sprintf("seg-%d", i)
		_, err := app.enqueue(ctx, app.conn, "key", key, "identity", "capped", "channel", c.channel, "to_addr", "+15551234567", "text", c.text)
		if c.ok {
			if err != nil {
				t.Errorf("%s: %v; want it written", key, err)
			}
			continue
		}
		n, enc := sms.Segments(c.text)
		want := fmt.Sprintf("msgq: text is %d SMS segments (%s, %d characters); identity capped allows at most 2 (max_segments)", n, enc, len([]rune(c.text)))
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "MQ422" || pe.ColumnName != "text" || pe.Message != want {
			t.Errorf("%s: %v; want MQ422 naming text: %s", key, err, want)
		}
	}
	if n := count(t, h, "messages"); n != 4 {
		t.Fatalf("%d messages written, want the 4 within max_segments", n)
	}
}
