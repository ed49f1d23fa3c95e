package storeopen

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redacted replaces a password wherever a store URL is printed.
const redacted = "xxxxx"

// secretParams are the connection parameters whose values are secrets,
// in a URL's query (?password=) and in the key=value form alike.
var secretParams = []string{"password", "sslpassword"}

// isSecretParam says whether a parameter name (as written, any case) is a
// secret one.
func isSecretParam(k string) bool {
	return slices.Contains(secretParams, strings.ToLower(strings.TrimSpace(k)))
}

// kvSecret matches password=VALUE in the key=value form ("host=h
// password='x y' dbname=d"): a quoted value up to its closing quote
// (backslash escapes it), else up to the next space.
var kvSecret = regexp.MustCompile(`(?i)\b(password|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s]*)`)

// RedactURL is the one function that makes a store URL printable: it hides
// the password however it was written (postgres://u:PW@h/db, a
// ?password=PW or &sslpassword=PW query parameter, or the key=value form
// "host=h password=PW") and leaves the rest as written.
func RedactURL(raw string) string {
	scheme, rest, isURL := strings.Cut(raw, "://")
	if !isURL || strings.ContainsAny(scheme, " =") {
		return kvSecret.ReplaceAllString(raw, "${1}${2}"+redacted)
	}
	// The authority ends at the first /, ? or #; its userinfo at the last
	// @ in it (a password may itself hold an unescaped @ or :).
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPW := strings.Cut(authority[:at], ":"); hasPW {
			authority = user + ":" + redacted + authority[at:]
		}
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		query, frag, hasFrag := strings.Cut(query, "#")
		parts := strings.Split(query, "&")
		for i, p := range parts {
			k, _, hasV := strings.Cut(p, "=")
			if uk, err := url.QueryUnescape(k); err == nil {
				k = uk
			}
			if hasV && isSecretParam(k) {
				parts[i] = p[:strings.Index(p, "=")+1] + redacted
			}
		}
		tail = path + "?" + strings.Join(parts, "&")
		if hasFrag {
			tail += "#" + frag
		}
	}
	return scheme + "://" + authority + tail
}

// storeSecrets returns every password a store URL carries, in each form
// it may be quoted in (as written, and percent-decoded), longest first, so
// that an error message that quotes one can be cleaned.
func storeSecrets(raw string) []string {
	var out []string
	add := func(s string) {
		if s != "" && s != redacted && !slices.Contains(out, s) {
			out = append(out, s)
		}
		if d, err := url.PathUnescape(s); err == nil && d != s && d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s && d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	scheme, rest, isURL := strings.Cut(raw, "://")
	if isURL && !strings.ContainsAny(scheme, " =") {
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		authority, tail := rest[:end], rest[end:]
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(authority[:at], ":"); ok {
				add(pw)
			}
		}
		if _, query, ok := strings.Cut(tail, "?"); ok {
			query, _, _ = strings.Cut(query, "#")
			for p := range strings.SplitSeq(query, "&") {
				k, v, ok := strings.Cut(p, "=")
				if uk, err := url.QueryUnescape(k); err == nil {
					k = uk
				}
				if ok && isSecretParam(k) {
					add(v)
				}
			}
		}
	} else {
		for _, m := range kvSecret.FindAllStringSubmatch(raw, -1) {
			v := m[3]
			add(v)
			if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				add(strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`), `\\`, `\`))
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// RedactText hides, in any text (an error message, a log line), the
// passwords the store URL raw carries, and the password of any store URL
// the text itself quotes.
func RedactText(raw, text string) string {
	for _, s := range storeSecrets(raw) {
		text = strings.ReplaceAll(text, s, redacted)
	}
	return RedactQuotedURLs(text)
}

// quotedURL finds URLs with a userinfo password or a secret query
// parameter inside free text.
var quotedURL = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// kvSecretInText is kvSecret for free text, where an unquoted value also
// ends at & or a quote (the text may quote a URL or a Go string).
var kvSecretInText = regexp.MustCompile(`(?i)\b(password|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&"` + "`" + `]*)`)

// RedactQuotedURLs hides the password of every store URL (and every
// password=VALUE pair) that text quotes, whatever store is configured.
func RedactQuotedURLs(text string) string {
	text = quotedURL.ReplaceAllStringFunc(text, RedactURL)
	return kvSecretInText.ReplaceAllString(text, "${1}${2}"+redacted)
}

// redactedError is an error whose message had a store URL's password
// taken out. It keeps the driver's error underneath, so that callers can
// still tell a lost connection from a refusal.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactErr hides the password of the store URL raw wherever err's
// message shows it: the driver's message may quote the URL.
func RedactErr(raw string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := RedactText(raw, msg)
	if clean == msg {
		return err
	}
	return &redactedError{clean, err}
}
