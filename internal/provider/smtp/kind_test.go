package smtp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/smtp"
)

// TestKindDecodeReadsEveryKeyStrictly: every setting is read, defaults
// filled, and each mistake refused in one line naming the key.
func TestKindDecodeReadsEveryKeyStrictly(t *testing.T) {
	s, err := smtp.Kind.Decode(map[string]any{"host": "smtp.example.com", "port": 2525, "username_env": "U", "password_env": "P",
		"from": "Shop <orders@example.com>", "tls": "implicit", "ca_file": "/etc/ca.pem", "templates": "/srv/mail"})
	if err != nil {
		t.Fatal(err)
	}
	got := *s.(*smtp.Settings)
	want := smtp.Settings{Host: "smtp.example.com", Port: 2525, UsernameEnv: "U", PasswordEnv: "P", From: "Shop <orders@example.com>",
		TLS: "implicit", CAFile: "/etc/ca.pem", Templates: "/srv/mail"}
	if got != want {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if env := s.SendEnv(); len(env) != 2 || env[0].String() != "U (username_env)" || env[1].String() != "P (password_env)" {
		t.Errorf("SendEnv %v", env)
	}
	if mt, ok := s.(provider.MailTemplater); !ok || mt.MailTemplates() != "/srv/mail" {
		t.Errorf("templates directory not offered: %v", s)
	}

	d, err := smtp.Kind.Decode(map[string]any{"host": "127.0.0.1", "from": "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if ds := d.(*smtp.Settings); ds.TLS != smtp.TLSStartTLS || ds.Port != 0 || len(d.SendEnv()) != 0 || d.WebhookEnv() != nil {
		t.Errorf("defaults %+v: want starttls, port 0 (587), no env", ds)
	}
	if k, v := d.Sender(); k != "" || v != "" || d.Account() != "" || d.ServiceWindow() != 0 {
		t.Error("an smtp identity has no sender, account or window")
	}

	for _, c := range []struct {
		raw  map[string]any
		want string
	}{
		{map[string]any{"host": "h", "from": "a@example.com", "hots": "x"}, `unknown setting "hots" for provider smtp (known: host, port, username_env, password_env, from, tls, ca_file, templates)`},
		{map[string]any{"host": "h", "from": "a@example.com", "token_env": "T"}, "token_env is not a setting of provider smtp"},
		{map[string]any{"from": "a@example.com"}, "provider smtp needs host and from"},
		{map[string]any{"host": "h"}, "provider smtp needs host and from"},
		{map[string]any{"host": "h", "from": "a@example.com", "username_env": "U"}, "needs both username_env and password_env"},
		{map[string]any{"host": "h", "from": "a@example.com", "password_env": "P"}, "needs both username_env and password_env"},
		{map[string]any{"host": "h", "from": "a@example.com", "tls": "ssl"}, `tls must be starttls, implicit or none (got "ssl")`},
		{map[string]any{"host": "h", "from": "a@example.com", "port": 0}, `port must be a number between 1 and 65535 (got "0")`},
		{map[string]any{"host": "h", "from": "a@example.com", "port": "smtp"}, `port must be a number between 1 and 65535 (got "smtp")`},
		{map[string]any{"host": "h", "from": "a@example.com", "tls": "none", "ca_file": "/ca"}, "ca_file has no use with tls none"},
		{map[string]any{"host": "h", "from": "not an address"}, `provider smtp: smtp from "not an address"`},
		{map[string]any{"host": "h", "from": []any{"a@example.com"}}, "from must be a string"},
		{map[string]any{"host": "bad host", "from": "a@example.com"}, "smtp host must be a host name or IP address"},
	} {
		_, err := smtp.Kind.Decode(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Decode(%v) = %v, want one line containing %q", c.raw, err, c.want)
		}
	}
	var unknown *provider.UnknownSettingError
	if _, err := smtp.Kind.Decode(map[string]any{"host": "h", "from": "a@example.com", "base_url": "x"}); !errors.As(err, &unknown) || unknown.Key != "base_url" {
		t.Errorf("another kind's key: %v, want an UnknownSettingError naming base_url", err)
	}
}

// TestKindNewReadsTheCredentialsFromTheEnvironment: the client gets the
// username and password through getenv, and is built without them for
// the kind's properties.
func TestKindNewReadsTheCredentialsFromTheEnvironment(t *testing.T) {
	s, err := smtp.Kind.Decode(map[string]any{"host": "127.0.0.1", "port": "2525", "from": "a@example.com", "tls": "none",
		"username_env": "MAIL_USER", "password_env": "MAIL_PASS"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MAIL_USER": "shop", "MAIL_PASS": "s3cret"}
	p, err := s.New(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if str := p.(*smtp.Client).String(); !strings.Contains(str, `Username:"shop"`) || strings.Contains(str, "s3cret") || !strings.Contains(str, "Port:2525") {
		t.Errorf("client %s: want the username, the port, and the password redacted", str)
	}
	bare, err := s.New(func(string) string { return "" })
	if err != nil || bare.Idempotent() || smtp.Kind.Idempotent {
		t.Errorf("tokenless New: %v, %v; want a client that is not idempotent", bare, err)
	}
	if _, err := s.New(func(k string) string { return map[string]string{"MAIL_USER": "shop"}[k] }); err == nil ||
		!strings.Contains(err.Error(), "username is set without a password") {
		t.Errorf("a username without its password: %v", err)
	}
}
