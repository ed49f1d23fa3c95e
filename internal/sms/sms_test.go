package sms

import (
	"strings"
	"testing"
	"unicode/utf16"

	"pgregory.net/rapid"
)

func TestTheAlphabetHas127CharactersAndTheExtensionTen(t *testing.T) {
	// 128 codes minus the escape; the extension table's ten characters
	// (form feed, ^ { } \ [ ~ ] | €) are the ones an SMS can escape to.
	if n := len([]rune(basic)); n != 127 {
		t.Errorf("basic alphabet has %d characters, want 127", n)
	}
	if n := len([]rune(extension)); n != 10 {
		t.Errorf("extension table has %d characters, want 10", n)
	}
	if len(septets) != 137 {
		t.Errorf("%d distinct characters, want 137 (a character is in both tables)", len(septets))
	}
}

func TestSegments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		text  string
		count int
		enc   string
	}{
		{"empty", "", 0, GSM7},
		{"one character", "a", 1, GSM7},
		{"160 GSM characters fit one message", strings.Repeat("a", 160), 1, GSM7},
		{"161 GSM characters are two segments", strings.Repeat("a", 161), 2, GSM7},
		{"306 GSM characters are two segments of 153", strings.Repeat("a", 306), 2, GSM7},
		{"307 GSM characters are three", strings.Repeat("a", 307), 3, GSM7},
		{"accented letters of the alphabet stay GSM", "Café à Zürich: Ñoño, ¿qué?", 1, GSM7},
		{"ú is not in the alphabet (only ù is)", "Ñandú", 1, UCS2},
		{"Greek capitals of the alphabet stay GSM", "ΔΦΓΛΩΠΨΣΘΞ", 1, GSM7},
		{"an extension character takes two septets", strings.Repeat("a", 159) + "€", 2, GSM7},
		{"80 extension characters are exactly 160 septets", strings.Repeat("{", 80), 1, GSM7},
		{"81 extension characters are two segments", strings.Repeat("{", 81), 2, GSM7},
		// 152 septets, then a two-septet character that would straddle
		// the segment boundary: it moves whole to the next segment.
		{"an escape is never split across segments", strings.Repeat("a", 152) + "[" + strings.Repeat("a", 152) + "]", 3, GSM7},
		{"the same text without the split fits two", strings.Repeat("a", 151) + "[" + strings.Repeat("a", 151) + "]", 2, GSM7},
		{"one character outside the alphabet makes it UCS-2", "Hello ç", 1, UCS2},
		{"70 UCS-2 units fit one message", strings.Repeat("я", 70), 1, UCS2},
		{"71 UCS-2 units are two segments", strings.Repeat("я", 71), 2, UCS2},
		{"134 UCS-2 units are two segments of 67", strings.Repeat("я", 134), 2, UCS2},
		{"135 are three", strings.Repeat("я", 135), 3, UCS2},
		{"an emoji is a surrogate pair: 35 fill one message", strings.Repeat("😀", 35), 1, UCS2},
		{"36 emoji are 72 units: two segments", strings.Repeat("😀", 36), 2, UCS2},
		// 66 units then a pair: the pair does not fit in 67 and moves.
		{"a surrogate pair is never split", strings.Repeat("я", 66) + "😀" + strings.Repeat("я", 65) + "😀", 3, UCS2},
		{"GSM text with one emoji becomes UCS-2", strings.Repeat("a", 70) + "😀", 2, UCS2},
		{"lower-case ç is not in the alphabet (only Ç is)", "ç", 1, UCS2},
		{"invalid UTF-8 counts as U+FFFD", "a\xffb", 1, UCS2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, enc := Segments(tc.text)
			if n != tc.count || enc != tc.enc {
				t.Errorf("Segments(%.40q...) = %d, %s; want %d, %s", tc.text, n, enc, tc.count, tc.enc)
			}
		})
	}
}

// The properties: the count is what the capacities imply for texts
// without multi-unit characters, a text never needs fewer segments than
// its size over the per-segment capacity, and adding characters never
// lowers the count.
func TestSegmentsProperties(t *testing.T) {
	gsmChars := []rune(basic + extension)
	rapid.Check(t, func(t *rapid.T) {
		var text string
		if rapid.Bool().Draw(t, "gsm") {
			rs := rapid.SliceOf(rapid.SampledFrom(gsmChars)).Draw(t, "runes")
			text = string(rs)
		} else {
			text = rapid.String().Draw(t, "text")
		}
		n, enc := Segments(text)
		if text == "" {
			if n != 0 {
				t.Fatalf("empty text: %d segments", n)
			}
			return
		}
		size, single, per := 0, gsmSingle, gsmSegment
		if enc == GSM7 {
			for _, r := range text {
				size += septets[r]
			}
		} else {
			single, per = ucsSingle, ucsSegment
			for _, r := range text {
				size += utf16.RuneLen(r)
			}
		}
		switch {
		case size <= single && n != 1:
			t.Fatalf("%d units fit one message, got %d segments", size, n)
		case size > single && n < (size+per-1)/per:
			t.Fatalf("%d units in %d segments of %d", size, n, per)
		case size > single && n > (size+per-1)/per+(size/per):
			t.Fatalf("%d units in %d segments: more than the splits allow", size, n)
		}
		more := text + rapid.String().Draw(t, "more")
		if m, enc2 := Segments(more); enc2 == enc && m < n {
			t.Fatalf("appending text lowered the count from %d to %d", n, m)
		}
	})
}
