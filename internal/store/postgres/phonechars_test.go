package postgres

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"
)

// The phonenumbers library reads numbers with Go regular expressions of
// Unicode classes (\p{Nd}, its VALID_PUNCTUATION, PLUS_CHARS, the
// full-width extension labels), most of them case-insensitive. The SQL
// reads them with the same expressions, translated here into
// PostgreSQL's (ARE) syntax and generated into phone_metadata.sql as
// phone_re(name): every character written as a \u or \U escape, every
// case-insensitive letter as the bracket of its Go case-folding orbit (so
// the translation is matched case-sensitively and does not depend on the
// server's locale), every group non-capturing.

// phonePatterns are the library's expressions enqueue() reads numbers
// with, by the names phone_re() knows them.
func phonePatterns() [][2]string {
	return [][2]string{
		{"start", phonenumbers.VALID_START_CHAR_PATTERN.String()},
		{"unwanted_end", phonenumbers.UNWANTED_END_CHAR_PATTERN.String()},
		{"second_number", phonenumbers.SECOND_NUMBER_START_PATTERN.String()},
		{"viable", phonenumbers.VALID_PHONE_NUMBER_PATTERN.String()},
		{"extension", phonenumbers.EXTN_PATTERN.String()},
		{"alpha", phonenumbers.VALID_ALPHA_PHONE_PATTERN.String()},
		{"plus", "^" + phonenumbers.PLUS_CHARS_PATTERN.String()},
		{"global_number_digits", phonenumbers.RFC3966_GLOBAL_NUMBER_DIGITS_PATTERN.String()},
		{"domainname", phonenumbers.RFC3966_DOMAINNAME_PATTERN.String()},
		{"not_digit", "[^" + phonenumbers.DIGITS + "]"},
		{"non_ascii", `[^\x00-\x7f]`},
	}
}

// phoneCharMaps are the library's character mappings as translate()
// arguments: digits (NormalizeDigitsOnly: the digits it maps to ASCII;
// other decimal digits it keeps as they are) and vanity
// (normalize with three letters or more: what becomes a keypad digit;
// anything else is dropped).
func phoneCharMaps() (digitsFrom, digitsTo, vanityFrom, vanityTo string, err error) {
	var df, dt, vf, vt strings.Builder
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		s := string(r)
		if unicode.IsDigit(r) && r > '9' {
			if d := phonenumbers.NormalizeDigitsOnly(s); d != s {
				if len(d) != 1 || d[0] < '0' || d[0] > '9' {
					return "", "", "", "", fmt.Errorf("digit %U normalises to %q", r, d)
				}
				df.WriteRune(r)
				dt.WriteString(d)
			}
		}
		if d := phonenumbers.ConvertAlphaCharactersInNumber(s); d != s {
			if len(d) != 1 || d[0] < '0' || d[0] > '9' {
				return "", "", "", "", fmt.Errorf("%U converts to %q", r, d)
			}
			vf.WriteRune(r)
			vt.WriteString(d)
		}
	}
	return df.String(), dt.String(), vf.String(), vt.String(), nil
}

// pgRegexp translates a Go regular expression into PostgreSQL's ARE.
func pgRegexp(goRE string) (string, error) {
	re, err := syntax.Parse(goRE, syntax.Perl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := writePG(&b, re); err != nil {
		return "", fmt.Errorf("%s: %w", goRE, err)
	}
	return b.String(), nil
}

func pgRune(r rune) string {
	switch {
	case r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
		return string(r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}

// foldOrbit is r and the runes Go's case folding equates with it.
func foldOrbit(r rune) []rune {
	out := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// pgClass writes a bracket of ranges (lo, hi pairs), without the
// surrogates (never in valid text, and refused in a PostgreSQL pattern).
func pgClass(ranges []rune) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for _, p := range [][2]rune{{lo, min(hi, 0xd7ff)}, {max(lo, 0xe000), hi}} {
			if p[0] > p[1] {
				continue
			}
			b.WriteString(pgRune(p[0]))
			if p[1] != p[0] {
				b.WriteByte('-')
				b.WriteString(pgRune(p[1]))
			}
		}
	}
	b.WriteByte(']')
	return b.String()
}

func writePG(b *strings.Builder, re *syntax.Regexp) error {
	sub := func(r *syntax.Regexp) error {
		b.WriteString("(?:")
		if err := writePG(b, r); err != nil {
			return err
		}
		b.WriteString(")")
		return nil
	}
	switch re.Op {
	case syntax.OpNoMatch:
		b.WriteString(`[^\u0000-\U0010ffff]`)
	case syntax.OpEmptyMatch:
		b.WriteString("(?:)")
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && len(foldOrbit(r)) > 1 {
				var rs []rune
				for _, f := range foldOrbit(r) {
					rs = append(rs, f, f)
				}
				b.WriteString(pgClass(rs))
			} else {
				b.WriteString(pgRune(r))
			}
		}
	case syntax.OpCharClass:
		// The parser has already added the case-folded runes of a
		// case-insensitive class.
		b.WriteString(pgClass(re.Rune))
	case syntax.OpAnyCharNotNL:
		b.WriteString(`[^\u000a]`)
	case syntax.OpAnyChar:
		b.WriteString(`[\u0000-\ud7ff\ue000-\U0010ffff]`)
	case syntax.OpBeginText:
		b.WriteString("^")
	case syntax.OpEndText:
		if re.Flags&syntax.WasDollar == 0 {
			return fmt.Errorf(`\z is not translated`)
		}
		b.WriteString("$")
	case syntax.OpCapture:
		return sub(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		if err := sub(re.Sub[0]); err != nil {
			return err
		}
		switch re.Op {
		case syntax.OpStar:
			b.WriteString("*")
		case syntax.OpPlus:
			b.WriteString("+")
		case syntax.OpQuest:
			b.WriteString("?")
		default:
			if re.Max == -1 {
				fmt.Fprintf(b, "{%d,}", re.Min)
			} else if re.Max == re.Min {
				fmt.Fprintf(b, "{%d}", re.Min)
			} else {
				fmt.Fprintf(b, "{%d,%d}", re.Min, re.Max)
			}
		}
		// Greediness: the SQL only asks whether and where a match
		// starts (every use is anchored or a leftmost search), which
		// greediness does not change.
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if err := sub(s); err != nil {
				return err
			}
		}
	case syntax.OpAlternate:
		for i, s := range re.Sub {
			if i > 0 {
				b.WriteString("|")
			}
			if err := sub(s); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("operator %v is not translated", re.Op)
	}
	return nil
}

// generatePhoneChars is phone_metadata.sql's phone_re() and phone_map().
func generatePhoneChars() (string, error) {
	var b strings.Builder
	b.WriteString("\n-- The library's expressions (phonechars_test.go translates them from Go's syntax)\n")
	b.WriteString("-- and character mappings, read by normalize_phone (migrations/0019_sql_enqueue_unicode.sql).\n")
	b.WriteString("CREATE OR REPLACE FUNCTION phone_re(name text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$\n    SELECT CASE name")
	for _, p := range phonePatterns() {
		pg, err := pgRegexp(p[1])
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n    -- %s\n    WHEN %s THEN E%s", p[1], sqlString(p[0]), sqlString(strings.ReplaceAll(pg, `\`, `\\`)))
	}
	b.WriteString(" END\n$$;\n")
	df, dt, vf, vt, err := phoneCharMaps()
	if err != nil {
		return "", err
	}
	b.WriteString("CREATE OR REPLACE FUNCTION phone_map(name text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$\n    SELECT CASE name")
	for _, p := range [][2]string{{"digits_from", df}, {"digits_to", dt}, {"vanity_from", vf}, {"vanity_to", vt}} {
		if !utf8.ValidString(p[1]) {
			return "", fmt.Errorf("%s is not UTF-8", p[0])
		}
		fmt.Fprintf(&b, "\n    WHEN %s THEN %s", sqlString(p[0]), sqlString(p[1]))
	}
	b.WriteString(" END\n$$;\n")
	return b.String(), nil
}
