package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgq/msgq/internal/queue"
)

// templateBody is a template in the API's JSON (docs/openapi.json).
type templateBody struct {
	Name       string   `json:"name"`
	Language   string   `json:"language"`
	Parameters []string `json:"parameters"`
}

// stepBody is a challenge's later step in the API's JSON.
type stepBody struct {
	Identity string        `json:"identity"`
	To       string        `json:"to"`
	Region   string        `json:"region"`
	Channel  string        `json:"channel"`
	Template *templateBody `json:"template"`
	Text     string        `json:"text"`
	Subject  string        `json:"subject"`
	After    string        `json:"after"`
}

// sendBody is one send in the API's JSON: a --file line's fields, with the
// template as an object. The tenant is the API key's, never the body's;
// the key is the Idempotency-Key header's, except in a batch's item.
type sendBody struct {
	Key                 string        `json:"key"`
	To                  string        `json:"to"`
	Region              string        `json:"region"`
	Channel             string        `json:"channel"`
	Identity            string        `json:"identity"`
	Template            *templateBody `json:"template"`
	Text                string        `json:"text"`
	Subject             string        `json:"subject"`
	FallbackTemplate    *templateBody `json:"fallback_template"`
	Purpose             string        `json:"purpose"`
	Ref                 string        `json:"ref"`
	Lane                string        `json:"lane"`
	NotBefore           string        `json:"not_before"`
	ExpiresIn           string        `json:"expires_in"`
	ExpiresAt           string        `json:"expires_at"`
	QuietHours          string        `json:"quiet_hours"`
	Steps               []stepBody    `json:"steps"`
	AcceptDuplicateRisk bool          `json:"accept_duplicate_risk"`
	ThenIfUndelivered   bool          `json:"then_if_undelivered"`
	Supersedes          string        `json:"supersedes"`
}

// spec is the send as `msgq send --file` reads it.
func (b *sendBody) spec(tenant, key string) queue.Spec {
	s := queue.Spec{Key: key, To: b.To, Region: b.Region, Channel: b.Channel, Identity: b.Identity, Text: b.Text, Subject: b.Subject,
		Purpose: b.Purpose, Ref: b.Ref, Lane: b.Lane, NotBefore: b.NotBefore, ExpiresIn: b.ExpiresIn, ExpiresAt: b.ExpiresAt,
		Tenant: tenant, QuietHours: b.QuietHours, AcceptDuplicateRisk: b.AcceptDuplicateRisk, ThenIfUndelivered: b.ThenIfUndelivered,
		Supersedes: b.Supersedes}
	if t := b.Template; t != nil {
		s.Template, s.Lang, s.Params = t.Name, t.Language, t.Parameters
	}
	if t := b.FallbackTemplate; t != nil {
		s.FallbackTemplate, s.FallbackParams = t.Name, t.Parameters
	}
	for _, st := range b.Steps {
		ss := queue.Step{Identity: st.Identity, To: st.To, Region: st.Region, Channel: st.Channel, Text: st.Text, Subject: st.Subject, After: st.After}
		if t := st.Template; t != nil {
			ss.Template, ss.Lang, ss.Params = t.Name, t.Language, t.Parameters
		}
		s.Steps = append(s.Steps, ss)
	}
	return s
}

// NewSendParser is msgq serve's Parser: a body is checked and turned into
// store parameters by the admission `msgq send --file` uses for a line
// (internal/queue), so the API accepts and refuses exactly what the CLI
// does. defaults are the config's (Tenant is each call's, the API key's);
// now is the host's clock.
func NewSendParser(defaults queue.Defaults, now func() time.Time) Parser {
	return func(tenant, key string, body []byte) (Item, *Error) {
		var b sendBody
		if e := decodeStrict(body, &b); e != nil {
			return Item{}, e
		}
		switch {
		case key != "" && b.Key != "" && b.Key != key:
			return Item{}, invalid("key", "the body's key differs from the Idempotency-Key header: give the key in the header only")
		case key == "" && b.Key == "":
			return Item{}, invalid("key", "is required: each item of a batch has its own idempotency key")
		case key == "":
			key = b.Key
		}
		if b.Template == nil && b.Text == "" {
			return Item{}, invalid("template", `give "template": {"name": ..., "language": ..., "parameters": [...]} or "text"`)
		}
		if b.Template != nil && b.Text != "" {
			return Item{}, invalid("text", "cannot be combined with template: send one or the other")
		}
		spec := b.spec(tenant, key)
		d := defaults
		d.Tenant = tenant
		if spec.IsChallenge() {
			cp, err := spec.Challenge(now(), d)
			if err != nil {
				return Item{}, invalidErr(err)
			}
			return Item{Key: key, Challenge: &cp}, nil
		}
		p, err := spec.Admit(now(), d)
		if err != nil {
			return Item{}, invalidErr(err)
		}
		return Item{Key: key, Single: &p}, nil
	}
}

func invalid(field, msg string) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: field, Message: field + ": " + msg}
}

// apiInvalid is the 422 for what the CLI would refuse with exit 2, naming
// the field when the error does.
func invalidErr(err error) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: queue.FieldOf(err),
		Message: strings.Join(strings.Fields(err.Error()), " ")}
}

// decodeStrict decodes one JSON object, refusing invalid UTF-8, unknown
// fields (422: a typo must never silently drop a setting), trailing data
// and a key given twice in one object at any depth (422 duplicate_key); a
// body that is not JSON at all is 400.
func decodeStrict(body []byte, v any) *Error {
	malformed := func(msg string) *Error {
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: msg}
	}
	if !utf8.Valid(body) {
		return malformed("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		msg := strings.TrimPrefix(err.Error(), "json: ")
		switch {
		case strings.HasPrefix(msg, "unknown field "):
			field := strings.Trim(strings.TrimPrefix(msg, "unknown field "), `"`)
			return &Error{Status: http.StatusUnprocessableEntity, Code: CodeUnknownField, Field: field, Message: msg}
		case errors.As(err, &te) && te.Field != "":
			return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: te.Field,
				Message: "field " + te.Field + " must be " + jsonKind(te.Type.Kind().String()) + ", got " + te.Value}
		case errors.As(err, &te):
			return malformed("the body must be one JSON object, got " + te.Value)
		}
		return malformed("malformed JSON: " + msg)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return malformed("malformed JSON: more than one value in the body")
	}
	// Checked once the body is known to be JSON: the decoder kept the
	// last of two values for one key, and which one was meant is unknown.
	return CheckDuplicateKeys(body)
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "bool":
		return "true or false"
	case "ptr", "struct":
		return "an object"
	}
	return k
}
