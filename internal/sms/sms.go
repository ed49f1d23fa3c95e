// Package sms counts the segments an SMS text is sent in.
//
// An SMS carries 140 octets. A text whose characters are all in the GSM
// 03.38 (3GPP TS 23.038) default alphabet is packed as 7-bit septets: 160 to
// one message. Characters of the alphabet's extension table (^ { } \ [ ] ~ |
// € and form feed) take two septets, an escape and the character. Any other
// character makes the whole text UCS-2: 16-bit units, 70 to one message,
// with characters outside the Basic Multilingual Plane (most emoji) taking
// two units (a surrogate pair). A longer text is split into concatenated
// segments, each losing room to the 6-octet user data header that numbers
// them: 153 septets or 67 units. A two-septet character or a surrogate pair
// is never split between segments, so a segment may hold one less.
//
// This is how carriers, and Twilio's own segment calculator and NumSegments,
// count (https://www.twilio.com/docs/glossary/what-sms-character-limit).
package sms

import "unicode/utf16"

// The encodings Segments reports.
const (
	GSM7 = "GSM-7"
	UCS2 = "UCS-2"
)

// Per-message capacities: a single message, and each segment of a
// concatenated one.
const (
	gsmSingle  = 160
	gsmSegment = 153
	ucsSingle  = 70
	ucsSegment = 67
)

// basic is the GSM 03.38 default alphabet, in code order (0x1B, the escape
// to the extension table, is not a character of its own and is left out).
const basic = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ" + "ÆæßÉ" +
	" !\"#¤%&'()*+,-./0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§" +
	"¿abcdefghijklmnopqrstuvwxyzäöñüà"

// extension is the default alphabet's extension table: two septets each.
const extension = "\f^{}\\[~]|€"

var septets = func() map[rune]int {
	m := make(map[rune]int, 140)
	for _, r := range basic {
		m[r] = 1
	}
	for _, r := range extension {
		m[r] = 2
	}
	return m
}()

// Segments returns how many SMS segments text is sent in and the encoding
// it needs (GSM7 or UCS2). An empty text is 0 segments of GSM7: there is
// nothing to send. Invalid UTF-8 bytes count as U+FFFD, which forces UCS2.
func Segments(text string) (count int, encoding string) {
	if text == "" {
		return 0, GSM7
	}
	sizes := make([]int, 0, len(text))
	gsm := true
	for _, r := range text {
		n, ok := septets[r]
		if !ok {
			gsm = false
			break
		}
		sizes = append(sizes, n)
	}
	if gsm {
		return pack(sizes, gsmSingle, gsmSegment), GSM7
	}
	sizes = sizes[:0]
	for _, r := range text {
		sizes = append(sizes, utf16.RuneLen(r))
	}
	return pack(sizes, ucsSingle, ucsSegment), UCS2
}

// pack counts the segments for characters of the given sizes: one if they
// fit in single, else segments of per each, never splitting a character.
func pack(sizes []int, single, per int) int {
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total <= single {
		return 1
	}
	count, used := 1, 0
	for _, n := range sizes {
		if used+n > per {
			count++
			used = 0
		}
		used += n
	}
	return count
}
