package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// DuplicateKey finds the first object key that appears twice in one
// object, at any depth of data, and says where: its path from the top
// ("to", "template.name", "steps[0].to"). encoding/json keeps the last of
// two values and matches keys to fields without regard to case, so
// {"to": A, "TO": B} would send to B; which value the client meant is
// unknown, and the send is refused instead (422 duplicate_key). Keys are
// compared as encoding/json compares them with a field's name: after
// unescaping, folding case.
//
// data must be valid JSON (decode it first): DuplicateKey does not check
// the syntax, and finds nothing in what is not JSON.
func DuplicateKey(data []byte) (path string, found bool) {
	return duplicateKey(data, 0)
}

// duplicateKey is DuplicateKey looking no deeper than maxDepth levels of
// objects and arrays (0: all): a batch's envelope is checked alone, each
// of its items by the parser, so that a bad item is refused alone.
func duplicateKey(data []byte, maxDepth int) (string, bool) {
	s := keyScanner{data: data, maxDepth: maxDepth}
	return s.value("", 1)
}

type keyScanner struct {
	data     []byte
	i        int
	maxDepth int
}

func (s *keyScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans the value at s.i, whose path is path and nesting depth.
func (s *keyScanner) value(path string, depth int) (string, bool) {
	s.space()
	if s.i >= len(s.data) {
		return "", false
	}
	check := s.maxDepth == 0 || depth <= s.maxDepth
	switch s.data[s.i] {
	case '{':
		s.i++
		var seen map[string]struct{}
		if check {
			seen = map[string]struct{}{}
		}
		for {
			s.space()
			if s.i >= len(s.data) || s.data[s.i] == '}' {
				s.i++
				return "", false
			}
			if s.data[s.i] == ',' {
				s.i++
				continue
			}
			raw := s.str()
			key := unquote(raw)
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			if check {
				f := string(foldName([]byte(key)))
				if _, dup := seen[f]; dup {
					return sub, true
				}
				seen[f] = struct{}{}
			}
			s.space()
			s.i++ // ':'
			if p, dup := s.value(sub, depth+1); dup {
				return p, true
			}
		}
	case '[':
		s.i++
		for n := 0; ; {
			s.space()
			if s.i >= len(s.data) || s.data[s.i] == ']' {
				s.i++
				return "", false
			}
			if s.data[s.i] == ',' {
				s.i++
				n++
				continue
			}
			if p, dup := s.value(path+"["+strconv.Itoa(n)+"]", depth+1); dup {
				return p, true
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return "", false
			}
			s.i++
		}
	}
	return "", false
}

// str skips the string at s.i and returns it with its quotes.
func (s *keyScanner) str() []byte {
	start := s.i
	s.i++ // the opening quote
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return s.data[start:s.i]
		}
		s.i++
	}
	return s.data[start:]
}

// unquote is a key's text; only a key with an escape needs decoding.
func unquote(raw []byte) string {
	for _, c := range raw {
		if c == '\\' {
			var k string
			if json.Unmarshal(raw, &k) == nil {
				return k
			}
			break
		}
	}
	if len(raw) >= 2 {
		return string(raw[1 : len(raw)-1])
	}
	return string(raw)
}

// foldName is encoding/json's (Go 1.21 and later) fold of a key: two keys
// with the same fold match the same struct field.
func foldName(in []byte) []byte {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune is the smallest rune of r's fold set.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// CheckDuplicateKeys is the 422 for a body (valid JSON) in which a key
// appears twice in one object, naming the key by its path; nil when none
// does.
func CheckDuplicateKeys(body []byte) *Error {
	if path, dup := DuplicateKey(body); dup {
		return duplicateKeyError(path)
	}
	return nil
}

func duplicateKeyError(path string) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeDuplicateKey, Field: path,
		Message: "duplicate key " + strconv.Quote(path) + ": a key may appear once in an object (keys differing only in case are the same key)"}
}
