package storeopen

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestRedactURLHidesThePasswordHoweverItIsWritten pins issue 12:
// postgres://u@h/db?password=SECRET printed SECRET in an error line.
func TestRedactURLHidesThePasswordHoweverItIsWritten(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"postgres://u:SECRET@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u:SECRET@h/db", "postgresql://u:xxxxx@h/db"},
		{"postgres://u@h/db?password=SECRET", "postgres://u@h/db?password=xxxxx"},
		{"postgres://u@h/db?sslmode=disable&password=SECRET&connect_timeout=2", "postgres://u@h/db?sslmode=disable&password=xxxxx&connect_timeout=2"},
		{"postgres://u@h/db?PASSWORD=SECRET", "postgres://u@h/db?PASSWORD=xxxxx"},
		{"postgres://u@h/db?pass%77ord=SECRET", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"postgres://u@h/db?sslpassword=SECRET", "postgres://u@h/db?sslpassword=xxxxx"},
		{"postgres://u:SE@CR:ET@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:SECRET@h/db?password=SECRET2#frag", "postgres://u:xxxxx@h/db?password=xxxxx#frag"},
		{"host=h user=u password=SECRET dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password = 'SE CR\\'ET' dbname=db", "host=h password = xxxxx dbname=db"},
		{"host=h dbname=db", "host=h dbname=db"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=disable"},
		{"sqlite:/var/lib/msgq/msgq.db", "sqlite:/var/lib/msgq/msgq.db"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRedactErrHidesEveryFormOfThePassword: a driver may quote the
// password as written or decoded.
func TestRedactErrHidesEveryFormOfThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ store, secret string }{
		{"postgres://u:s3cr%40t@h/db", "s3cr@t"},
		{"postgres://u:s3cr%40t@h/db", "s3cr%40t"},
		{"postgres://u@h/db?password=p%26w+d", "p&w d"},
		{"postgres://u@h/db?password=p%26w+d", "p%26w+d"},
		{"host=h password='a b\\'c' dbname=d", "a b'c"},
		{"host=h password=plain dbname=d", "plain"},
	} {
		err := RedactErr(c.store, fmt.Errorf("connect to %q failed: auth for %s refused", c.store, c.secret))
		if strings.Contains(err.Error(), c.secret) {
			t.Errorf("store %q: %q still shows %q", c.store, err, c.secret)
		}
		inner := errors.New("underneath")
		if e := RedactErr(c.store, fmt.Errorf("%s: %w", c.secret, inner)); !errors.Is(e, inner) {
			t.Errorf("store %q: the redacted error lost the driver's error underneath", c.store)
		}
	}
	// A text that quotes some other URL with a password is cleaned too.
	if got := RedactText("sqlite:q.db", `dial "postgres://a:TOPSECRET@h/d?password=ALSO&x=1" failed`); strings.Contains(got, "SECRET") || strings.Contains(got, "ALSO") || !strings.Contains(got, "&x=1") {
		t.Errorf("redactText: %q", got)
	}
}
