package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/nyaruka/phonenumbers"
	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/recipient"
)

// sqlNormalize calls the schema's normalize_phone or normalize_email.
func sqlNormalize(t *rapid.T, h *handle, channel, raw, region string) (string, bool) {
	var out, why *string
	var err error
	if channel == recipient.Email {
		err = h.pool.QueryRow(context.Background(), "SELECT addr, why FROM normalize_email($1)", raw).Scan(&out, &why)
	} else {
		err = h.pool.QueryRow(context.Background(), "SELECT e164, why FROM normalize_phone($1, $2)", raw, region).Scan(&out, &why)
	}
	if err != nil {
		t.Fatalf("normalize %q: %v", raw, err)
	}
	if (out == nil) == (why == nil) {
		t.Fatalf("normalize %q: e164 %v and why %v: exactly one must be set", raw, out, why)
	}
	if out == nil {
		return *why, false
	}
	return *out, true
}

// phoneInput draws what a user types for a phone number: a real number of
// some region (the library's examples of each type), written in one of
// the ways people write numbers, possibly damaged, and the region it is
// read as (its own, another, or none).
func phoneInput(t *rapid.T, regions []string) (raw, region string) {
	home := rapid.SampledFrom(regions).Draw(t, "home")
	types := []phonenumbers.PhoneNumberType{phonenumbers.FIXED_LINE, phonenumbers.MOBILE, phonenumbers.TOLL_FREE,
		phonenumbers.PREMIUM_RATE, phonenumbers.VOIP, phonenumbers.UAN, phonenumbers.PAGER, phonenumbers.SHARED_COST}
	n := phonenumbers.GetExampleNumberForType(home, rapid.SampledFrom(types).Draw(t, "type"))
	if n == nil {
		n = phonenumbers.GetExampleNumber(home)
	}
	cc := phonenumbers.GetCountryCodeForRegion(home)
	nsn := strings.Repeat("5", rapid.IntRange(2, 12).Draw(t, "nsn_len"))
	if n != nil {
		nsn = phonenumbers.GetNationalSignificantNumber(n)
	}
	// Damage: digits changed, dropped or added (too short, too long,
	// another prefix).
	switch rapid.IntRange(0, 5).Draw(t, "damage") {
	case 1:
		nsn = nsn[:rapid.IntRange(0, len(nsn)).Draw(t, "cut")]
	case 2:
		nsn += rapid.StringOfN(rapid.RuneFrom([]rune("0123456789")), 1, 6, -1).Draw(t, "extra")
	case 3:
		if len(nsn) > 0 {
			i := rapid.IntRange(0, len(nsn)-1).Draw(t, "at")
			nsn = nsn[:i] + rapid.SampledFrom(strings.Split("0123456789", "")).Draw(t, "digit") + nsn[i+1:]
		}
	case 4:
		nsn = rapid.StringOfN(rapid.RuneFrom([]rune("0123456789")), 0, 18, -1).Draw(t, "digits")
	}
	ccs := strconv.Itoa(cc)
	np := phonenumbers.GetNddPrefixForRegion(home, true)
	var s string
	switch rapid.IntRange(0, 7).Draw(t, "format") {
	case 0:
		s = "+" + ccs + nsn
	case 1:
		s = "00" + ccs + nsn
	case 2:
		s = "011" + ccs + nsn
	case 3:
		s = np + nsn // national, with the leading national prefix
	case 4:
		s = nsn
	case 5:
		s = ccs + nsn // the calling code without +
	case 6:
		if n != nil {
			s = phonenumbers.Format(n, phonenumbers.NATIONAL)
		} else {
			s = nsn
		}
	default:
		if n != nil {
			s = phonenumbers.Format(n, phonenumbers.INTERNATIONAL)
		} else {
			s = "+" + ccs + " " + nsn
		}
	}
	// Punctuation people type, and sometimes letters.
	var b strings.Builder
	for _, r := range s {
		if rapid.IntRange(0, 5).Draw(t, "punct?") == 0 {
			b.WriteString(rapid.SampledFrom([]string{" ", "-", ".", "(", ")", "/", "  ", " - "}).Draw(t, "punct"))
		}
		b.WriteRune(r)
	}
	s = b.String()
	if rapid.IntRange(0, 9).Draw(t, "letters?") == 0 {
		s += rapid.SampledFrom([]string{"a", "x", " ext 12", "ABC", "FLOWERS"}).Draw(t, "letters")
	}
	if rapid.IntRange(0, 9).Draw(t, "wrap?") == 0 {
		s = " (" + s + ") "
	}
	switch rapid.IntRange(0, 5).Draw(t, "region") {
	case 0:
		region = ""
	case 1:
		region = rapid.SampledFrom(regions).Draw(t, "other")
	case 2:
		region = strings.ToLower(home)
	default:
		region = home
	}
	return s, region
}

// TestSQLNormalizesPhoneNumbersLikeRecipient feeds the same inputs to
// recipient.Normalize and to the SQL normalize_phone that enqueue() reads
// numbers with: the same accept or refuse, the same E.164. The one
// narrowing, documented in docs/sql-enqueue.md: SQL refuses every number
// with letters (vanity numbers, extensions), which the CLI may read.
func TestSQLNormalizesPhoneNumbersLikeRecipient(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	h := open(t, url, freshSchema(t, url), Options{})
	regions := slices.Sorted(func(yield func(string) bool) {
		for r := range phonenumbers.GetSupportedRegions() {
			if !yield(r) {
				return
			}
		}
	})
	var read, refused int
	rapid.Check(t, func(t *rapid.T) {
		// Twenty inputs a check: 2,000 in a default run.
		for range 20 {
			comparePhone(t, h, regions, &read, &refused)
		}
	})
	// The inputs must exercise both answers, or the comparison proves little.
	t.Logf("%d inputs read, %d refused", read, refused)
	if read == 0 || refused == 0 {
		t.Fatalf("%d inputs read, %d refused: the generator must produce both", read, refused)
	}
}

func comparePhone(t *rapid.T, h *handle, regions []string, read, refused *int) {
	{
		raw, region := phoneInput(t, regions)
		want, goErr := recipient.Normalize(recipient.SMS, raw, region)
		got, ok := sqlNormalize(t, h, recipient.SMS, raw, region)
		if ok {
			*read++
		} else {
			*refused++
		}
		if strings.IndexFunc(raw, unicode.IsLetter) >= 0 {
			if ok {
				t.Fatalf("%q (region %q): SQL read %s, but refuses every number with letters", raw, region, got)
			}
			return
		}
		switch {
		case goErr == nil && !ok:
			t.Fatalf("%q (region %q): recipient reads %s, SQL refuses: %s", raw, region, want, got)
		case goErr != nil && ok:
			t.Fatalf("%q (region %q): recipient refuses (%v), SQL reads %s", raw, region, goErr, got)
		case ok && got != want:
			t.Fatalf("%q (region %q): recipient reads %s, SQL %s", raw, region, want, got)
		}
	}
}
