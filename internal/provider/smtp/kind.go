package smtp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/retry"
)

// Name is the provider's name in the config file.
const Name = "smtp"

// Kind is email through an SMTP submission server, "smtp" in the config.
// It sends no webhooks (bounces that come later by mail are not read) and
// has no look-up: msgq knows of a mail only what the server answered.
var Kind = provider.Kind{
	Name:     Name,
	Channels: []string{recipient.Email},
	Address:  provider.AddressEmail,
	// SMTP has no idempotency key: a mail whose reply to the final "." was
	// lost is unknown, never sent again blindly (package comment).
	Idempotent: false,
	Decode:     decode,
	Codes: []provider.Code{
		{Code: "2xx to the final \".\"", Class: retry.Accepted, Meaning: "the server took the mail: sent (provider id: the Message-ID)"},
		{Code: "4xx at any step", Class: retry.Transient, Meaning: "try again later (e.g. 451 4.7.1 greylisting, 452 mailbox full)"},
		{Code: "5xx at RCPT TO, DATA or the final \".\"", Class: retry.Permanent, Meaning: "refused for good; the reply and its enhanced code kept verbatim (550 5.1.1 no such user)"},
		{Code: "530, 534, 535, 538", Class: retry.Identity, Meaning: "our credentials or auth setup (535 5.7.8 credentials invalid): the identity pauses"},
		{Code: "5xx at the greeting, EHLO, STARTTLS or MAIL FROM", Class: retry.Identity, Meaning: "the server refuses us or our sender, not this mail"},
		{Code: "connection refused, reset or timed out, TLS failure, before the \".\" was written", Class: retry.Transient, Meaning: "nothing was queued"},
		{Code: "connection lost after DATA's final \".\" was written, before its reply", Class: retry.Ambiguous, Meaning: "the server may have queued it: unknown, never re-sent blindly"},
	},
}

var settingKeys = []string{"host", "port", "username_env", "password_env", "from", "tls", "ca_file", "templates"}

// Settings is an smtp identity's configuration. The username and password
// come from the environment; everything else is in the file.
type Settings struct {
	Host string
	// Port is 0 for the TLS mode's default (587, 465 or 25).
	Port                     int
	UsernameEnv, PasswordEnv string
	From                     string
	// TLS is starttls (the default), implicit or none (plain text: for a
	// local MTA or a test server only).
	TLS    string
	CAFile string
	// Templates is the directory of the identity's email templates
	// (internal/mailtemplate); "" means it sends text only.
	Templates string
}

func decode(raw map[string]any) (provider.Settings, error) {
	if err := provider.Strict(Name, raw, settingKeys, hint); err != nil {
		return nil, err
	}
	var s Settings
	var port string
	if err := provider.Strings(raw,
		provider.StringSetting{Key: "host", Dst: &s.Host}, provider.StringSetting{Key: "port", Dst: &port},
		provider.StringSetting{Key: "username_env", Dst: &s.UsernameEnv}, provider.StringSetting{Key: "password_env", Dst: &s.PasswordEnv},
		provider.StringSetting{Key: "from", Dst: &s.From}, provider.StringSetting{Key: "tls", Dst: &s.TLS},
		provider.StringSetting{Key: "ca_file", Dst: &s.CAFile}, provider.StringSetting{Key: "templates", Dst: &s.Templates}); err != nil {
		return nil, err
	}
	switch s.TLS {
	case "":
		s.TLS = TLSStartTLS
	case TLSStartTLS, TLSImplicit, TLSNone:
	default:
		return nil, fmt.Errorf("provider smtp: tls must be starttls, implicit or none (got %q)", s.TLS)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("provider smtp: port must be a number between 1 and 65535 (got %q)", port)
		}
		s.Port = n
	}
	switch {
	case s.Host == "" || s.From == "":
		return nil, fmt.Errorf("provider smtp needs host and from (the sender, e.g. \"Shop <orders@example.com>\")")
	case (s.UsernameEnv == "") != (s.PasswordEnv == ""):
		return nil, fmt.Errorf("provider smtp needs both username_env and password_env (the environment variables holding them), or neither for a server without AUTH")
	case s.CAFile != "" && s.TLS == TLSNone:
		return nil, fmt.Errorf("provider smtp: ca_file has no use with tls none")
	}
	// The same checks New makes of host and from, without reading the CA
	// file or any secret: a config mistake is reported by every command,
	// not first by the drain.
	if _, err := New(Config{Host: s.Host, Port: s.Port, From: s.From, TLS: s.TLS, HELO: "localhost"}); err != nil {
		return nil, fmt.Errorf("provider %s: %s", Name, oneLine(err))
	}
	return &s, nil
}

// hint explains the keys of the messaging kinds.
func hint(k string) string {
	switch k {
	case "token_env", "base_url", "phone_number_id", "account_sid_env", "auth_token_env":
		return fmt.Sprintf("%s is not a setting of provider smtp (it reads host, port, username_env, password_env, from, tls, ca_file and templates)", k)
	}
	return ""
}

// oneLine joins New's errors (one per line) into one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// SendEnv is the username and the password, when the server wants AUTH.
func (s *Settings) SendEnv() []provider.Env {
	if s.UsernameEnv == "" {
		return nil
	}
	return []provider.Env{{Key: "username_env", Name: s.UsernameEnv}, {Key: "password_env", Name: s.PasswordEnv}}
}

// WebhookEnv is none: SMTP sends no webhooks.
func (s *Settings) WebhookEnv() []provider.Env { return nil }

// New builds the client, with the credentials from the environment.
func (s *Settings) New(getenv func(string) string) (provider.Provider, error) {
	cfg := Config{Host: s.Host, Port: s.Port, From: s.From, TLS: s.TLS, CAFile: s.CAFile}
	if s.UsernameEnv != "" {
		cfg.Username, cfg.Password = getenv(s.UsernameEnv), getenv(s.PasswordEnv)
	}
	c, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("provider smtp: %w", err)
	}
	return c, nil
}

// Sender is none: no webhook names an smtp identity.
func (s *Settings) Sender() (string, string) { return "", "" }

// Account is none: email templates are files, not held by a provider.
func (s *Settings) Account() string { return "" }

// ServiceWindow is none: email has no customer-service window.
func (s *Settings) ServiceWindow() time.Duration { return 0 }

// MailTemplates is the identity's templates directory (provider.MailTemplater).
func (s *Settings) MailTemplates() string { return s.Templates }
