package phone

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"
	"pgregory.net/rapid"
)

// sameNumber reports how a and b differ in any field Parse sets, or "".
func sameNumber(a, b *phonenumbers.PhoneNumber) string {
	var diffs []string
	if a.GetCountryCode() != b.GetCountryCode() {
		diffs = append(diffs, "country code")
	}
	if a.GetNationalNumber() != b.GetNationalNumber() {
		diffs = append(diffs, "national number")
	}
	if (a.ItalianLeadingZero == nil) != (b.ItalianLeadingZero == nil) || a.GetItalianLeadingZero() != b.GetItalianLeadingZero() {
		diffs = append(diffs, "leading zero")
	}
	if (a.NumberOfLeadingZeros == nil) != (b.NumberOfLeadingZeros == nil) || a.GetNumberOfLeadingZeros() != b.GetNumberOfLeadingZeros() {
		diffs = append(diffs, "number of leading zeros")
	}
	if a.GetExtension() != b.GetExtension() || a.GetRawInput() != b.GetRawInput() ||
		a.GetPreferredDomesticCarrierCode() != b.GetPreferredDomesticCarrierCode() || a.CountryCodeSource != nil || b.CountryCodeSource != nil {
		diffs = append(diffs, "other fields")
	}
	return strings.Join(diffs, ", ")
}

// slowNormalize is Normalize without the fast path: the library's parse.
func slowNormalize(raw, region string) (string, error) { return normalize(raw, region, false) }

// checkAgainstTheLibrary fails t when the fast path answers s other than
// phonenumbers.Parse does, and when Normalize answers other than it does
// without the fast path.
func checkAgainstTheLibrary(t interface {
	Helper()
	Fatalf(string, ...any)
}, s string) (took bool) {
	t.Helper()
	fast, ok := parsePlusDigits(s)
	if ok {
		for _, region := range []string{"ZZ", "US", "GB"} {
			slow, err := phonenumbers.Parse(s, region)
			if err != nil {
				t.Fatalf("%q: the fast path read it, the library refuses it (region %s): %v", s, region, err)
			}
			if d := sameNumber(fast, slow); d != "" {
				t.Fatalf("%q (region %s): the fast path differs from the library in %s: %v against %v", s, region, d, fast, slow)
			}
		}
	}
	got, gotErr := Normalize(s, "")
	want, wantErr := slowNormalize(s, "")
	if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("Normalize(%q) = %q, %v; the library alone: %q, %v", s, got, gotErr, want, wantErr)
	}
	return ok
}

func TestPlusDigitsParseAsTheLibraryDoes(t *testing.T) {
	t.Parallel()
	// What applications send: the fast path must take these.
	for _, s := range []string{"+15551234567", "+447911123456", "+972541234567", "+390612345678", "+80012345678", "+8613812345678"} {
		if !checkAgainstTheLibrary(t, s) {
			t.Errorf("%q: the fast path declined a plain E.164 number", s)
		}
	}
	// Every region's example number of every type, in E.164, and with its
	// national prefix (or a 0) put back after the country code, which the
	// library may strip: the fast path must decline or agree.
	taken, plain, plainTaken := 0, 0, 0
	for region := range phonenumbers.GetSupportedRegions() {
		cc := strconv.Itoa(phonenumbers.GetCountryCodeForRegion(region))
		ndd := phonenumbers.GetNddPrefixForRegion(region, true)
		for _, typ := range []phonenumbers.PhoneNumberType{phonenumbers.FIXED_LINE, phonenumbers.MOBILE, phonenumbers.TOLL_FREE, phonenumbers.VOIP, phonenumbers.PAGER, phonenumbers.UAN} {
			n := phonenumbers.GetExampleNumberForType(region, typ)
			if n == nil {
				continue
			}
			e164 := phonenumbers.Format(n, phonenumbers.E164)
			nsn := phonenumbers.GetNationalSignificantNumber(n)
			plain++
			if _, ok := parsePlusDigits(e164); ok {
				plainTaken++
			}
			for _, s := range []string{e164, "+" + cc + ndd + nsn, "+" + cc + "0" + nsn, "+" + cc + "1" + nsn, e164[:len(e164)-1], e164 + "9"} {
				if checkAgainstTheLibrary(t, s) {
					taken++
				}
			}
		}
	}
	for cc := range phonenumbers.GetSupportedGlobalNetworkCallingCodes() {
		if n := phonenumbers.GetExampleNumberForNonGeoEntity(cc); n != nil {
			checkAgainstTheLibrary(t, phonenumbers.Format(n, phonenumbers.E164))
		}
	}
	// Only a region whose national prefix pattern matches any start (AR)
	// should leave its plain numbers to the library.
	if plainTaken*10 < plain*9 {
		t.Fatalf("the fast path took %d of %d example numbers in E.164, fewer than 90%%", plainTaken, plain)
	}
	t.Logf("the fast path took %d of %d example numbers in E.164, %d of all the example inputs", plainTaken, plain, taken)
}

// TestPlusDigitsPropertyAgreesWithTheLibrary: random "+" and digits, with
// real country codes, national prefixes and leading zeros, answer the same
// with and without the fast path.
func TestPlusDigitsPropertyAgreesWithTheLibrary(t *testing.T) {
	t.Parallel()
	var codes []int
	for cc := range phonenumbers.GetSupportedCallingCodes() {
		codes = append(codes, cc)
	}
	rapid.Check(t, func(t *rapid.T) {
		var b strings.Builder
		b.WriteString("+")
		if rapid.Bool().Draw(t, "known code") {
			b.WriteString(strconv.Itoa(rapid.SampledFrom(codes).Draw(t, "cc")))
		} else {
			b.WriteString(rapid.StringMatching(`[0-9]{1,3}`).Draw(t, "any code"))
		}
		b.WriteString(rapid.StringMatching(`(0|1|00|15|9)?[0-9]{0,18}`).Draw(t, "rest"))
		checkAgainstTheLibrary(t, b.String())
	})
}

// BenchmarkNormalize: one E.164 number, with the fast path and with the
// library's parse alone (bench/README.md quotes both).
func BenchmarkNormalize(b *testing.B) {
	for _, c := range []struct {
		name string
		fast bool
	}{{"fast", true}, {"library", false}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := normalize("+1555"+strconv.Itoa(1000000+i%9000000), "", c.fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
