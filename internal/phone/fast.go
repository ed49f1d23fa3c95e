package phone

import (
	"regexp"
	"strconv"
	"sync"

	"github.com/nyaruka/phonenumbers"
)

// parsePlusDigits reads the commonest input, "+" and digits alone (what
// applications store and send), into the number phonenumbers.Parse would
// return for it, without the library's general parse: its extension and
// viability regexps, which cannot match such input, cost about a tenth of
// msgq serve's CPU a send (bench/README.md). ok is false for any other
// input and for every case the library decides on its own: no country
// code found, a national significant number of a length it refuses, and a
// national prefix that its metadata may strip after the country code
// ("+44 07911..."). The caller then parses in full.
//
// Each step is the library's for this input (parseHelper in
// phonenumbers' phonenumberutil.go): the plus is an international prefix;
// the country code is the shortest of one to three leading digits that has
// regions; the rest is the national number, kept whole when its region's
// national-prefix-for-parsing pattern does not match its start; leading
// zeros are kept as "Italian" zeros. TestPlusDigitsParseAsTheLibraryDoes
// holds the two to the same answers.
func parsePlusDigits(s string) (*phonenumbers.PhoneNumber, bool) {
	const (
		minNSN = 2  // the library's MIN_LENGTH_FOR_NSN
		maxNSN = 17 // and MAX_LENGTH_FOR_NSN
		maxCC  = 3  // and MAX_LENGTH_COUNTRY_CODE
	)
	if len(s) < 2 || s[0] != '+' {
		return nil, false
	}
	digits := s[1:]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return nil, false
		}
	}
	if digits[0] == '0' || len(digits) <= minNSN {
		return nil, false
	}
	cc, ccLen := 0, 0
	for i := 1; i <= maxCC && i <= len(digits); i++ {
		c, _ := strconv.Atoi(digits[:i])
		if len(phonenumbers.GetRegionCodesForCountryCode(c)) > 0 {
			cc, ccLen = c, i
			break
		}
	}
	if cc == 0 {
		return nil, false
	}
	nsn := digits[ccLen:]
	if len(nsn) < minNSN || len(nsn) > maxNSN {
		return nil, false
	}
	prefix, known := nationalPrefix(cc)
	if !known || (prefix != nil && prefix.MatchString(nsn)) {
		return nil, false
	}
	national, err := strconv.ParseUint(nsn, 10, 64)
	if err != nil {
		return nil, false
	}
	cc32 := int32(cc)
	n := &phonenumbers.PhoneNumber{CountryCode: &cc32, NationalNumber: &national}
	if len(nsn) >= 2 && nsn[0] == '0' {
		// setItalianLeadingZerosForPhoneNumber: all zeros but the last
		// digit count, and one is implied by the flag alone.
		lead := true
		n.ItalianLeadingZero = &lead
		zeros := 1
		for zeros < len(nsn)-1 && nsn[zeros] == '0' {
			zeros++
		}
		if zeros != 1 {
			z := int32(zeros)
			n.NumberOfLeadingZeros = &z
		}
	}
	return n, true
}

// prefixes caches, per country code, the anchored national-prefix-for-
// parsing pattern of the code's main region (nil: it has none), compiled
// on first use so that a one-shot `msgq send` compiles one pattern, not
// all of them.
var prefixes sync.Map // int -> *regexp.Regexp (a nil pointer: no pattern)

// nationalPrefix returns that pattern; known is false when the library has
// no metadata for the code, a case left to the library.
func nationalPrefix(cc int) (re *regexp.Regexp, known bool) {
	if v, ok := prefixes.Load(cc); ok {
		return v.(*regexp.Regexp), true
	}
	md := metadataFor(cc)
	if md == nil {
		return nil, false
	}
	if p := md.GetNationalPrefixForParsing(); p != "" {
		compiled, err := regexp.Compile("^(?:" + p + ")")
		if err != nil {
			return nil, false
		}
		re = compiled
	}
	prefixes.Store(cc, re)
	return re, true
}

// metadataFor finds the metadata parseHelper uses for a number with
// country code cc: its main region's, or the non-geographic entity's.
func metadataFor(cc int) *phonenumbers.PhoneMetadata {
	regions := phonenumbers.GetRegionCodesForCountryCode(cc)
	if len(regions) == 0 {
		return nil
	}
	coll, err := phonenumbers.MetadataCollection()
	if err != nil {
		return nil
	}
	const nonGeo = "001" // the library's REGION_CODE_FOR_NON_GEO_ENTITY
	for _, md := range coll.GetMetadata() {
		if regions[0] == nonGeo {
			if md.GetId() == nonGeo && int(md.GetCountryCode()) == cc {
				return md
			}
		} else if md.GetId() == regions[0] {
			return md
		}
	}
	return nil
}
