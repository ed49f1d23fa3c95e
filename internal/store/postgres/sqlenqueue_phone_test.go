package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

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
	// Vanity numbers: some digits written as their keypad letters
	// (the library reads three letters or more as digits; fewer are
	// dropped).
	if rapid.IntRange(0, 5).Draw(t, "vanity?") == 0 {
		keypad := map[rune]string{'2': "ABCabc", '3': "DEFdef", '4': "GHIghi", '5': "JKLjkl", '6': "MNOmno",
			'7': "PQRSpqrs", '8': "TUVtuv", '9': "WXYZwxyz"}
		var v strings.Builder
		for _, r := range s {
			if k, ok := keypad[r]; ok && rapid.IntRange(0, 2).Draw(t, "letter?") == 0 {
				v.WriteByte(k[rapid.IntRange(0, len(k)-1).Draw(t, "key")])
				continue
			}
			v.WriteRune(r)
		}
		s = v.String()
	}
	// Punctuation people type, and sometimes letters.
	var b strings.Builder
	for _, r := range s {
		if rapid.IntRange(0, 5).Draw(t, "punct?") == 0 {
			b.WriteString(rapid.SampledFrom([]string{" ", "-", ".", "(", ")", "/", "  ", " - ", "~", "[", "]", "*", ",", "#", "x", "\t"}).Draw(t, "punct"))
		}
		b.WriteRune(r)
	}
	s = b.String()
	// Extensions, in the ways the library knows and a few it does not,
	// and stray letters or words.
	if rapid.IntRange(0, 3).Draw(t, "ext?") == 0 {
		marker := rapid.SampledFrom([]string{" ext ", " ext. ", " ext.", "ext", " EXT: ", " extension ", " extn ", " x ", " x", "x", " X.",
			"#", " #", ";ext=", ";", ",,", ",", " int ", " anexo ", " - ", " ", "/x", " / x", ";isub=", " ext=", " e ", "ext #"}).Draw(t, "marker")
		digits := rapid.StringOfN(rapid.RuneFrom([]rune("0123456789")), 0, 22, -1).Draw(t, "ext")
		s += marker + digits
		if rapid.Bool().Draw(t, "hash") {
			s += "#"
		}
	}
	if rapid.IntRange(0, 9).Draw(t, "letters?") == 0 {
		s += rapid.SampledFrom([]string{"a", "x", " ext 12", "ABC", "FLOWERS", " FLOWERS", "-FLOWERS", " call me", "!", "?", ")", " ("}).Draw(t, "letters")
	}
	if rapid.IntRange(0, 19).Draw(t, "prefix?") == 0 {
		s = rapid.SampledFrom([]string{"tel:", "Tel. ", "phone: ", "a", "&&x]"}).Draw(t, "prefix") + s
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
// numbers with: the same accept or refuse, the same E.164, for numbers
// with letters (vanity numbers), extensions and punctuation too. (The
// narrowings documented in docs/sql-enqueue.md, non-ASCII input and
// phone-context URIs, are not generated.)
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
	// Examples the CLI reads: a vanity number and extensions.
	for _, c := range [][2]string{{"+1 800 FLOWERS", ""}, {"1-800-flowers", "US"}, {"+1 555 123 4567 ext. 89", ""},
		{"(555) 123-4567 x12", "US"}, {"+15551234567;ext=3", ""}, {"+44 20 7946 0958 #12", ""}} {
		want, err := recipient.Normalize(recipient.SMS, c[0], c[1])
		if err != nil {
			t.Fatalf("%q: recipient refuses: %v", c[0], err)
		}
		var got *string
		if err := h.pool.QueryRow(context.Background(), "SELECT e164 FROM normalize_phone($1, $2)", c[0], c[1]).Scan(&got); err != nil || got == nil || *got != want {
			t.Fatalf("%q (region %q): SQL reads %v, %v; recipient %s", c[0], c[1], got, err, want)
		}
	}
	var read, refused, lettered int
	rapid.Check(t, func(t *rapid.T) {
		// Twenty inputs a check: 2,000 in a default run.
		for range 20 {
			comparePhone(t, h, regions, &read, &refused, &lettered)
		}
	})
	// The inputs must exercise both answers, or the comparison proves little.
	t.Logf("%d inputs read (%d of them with letters or an extension), %d refused", read, lettered, refused)
	if read == 0 || refused == 0 || lettered == 0 {
		t.Fatalf("%d inputs read (%d with letters or an extension), %d refused: the generator must produce each", read, lettered, refused)
	}
}

func comparePhone(t *rapid.T, h *handle, regions []string, read, refused, lettered *int) {
	{
		raw, region := phoneInput(t, regions)
		want, goErr := recipient.Normalize(recipient.SMS, raw, region)
		got, ok := sqlNormalize(t, h, recipient.SMS, raw, region)
		if ok {
			*read++
			if strings.ContainsAny(raw, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ#;,") {
				*lettered++
			}
		} else {
			*refused++
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
