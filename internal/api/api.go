// Package api is msgq serve's HTTP API (docs/api.md, the contract in
// openapi.json): idempotent sends for applications in any language, with
// bearer API keys bound to a tenant. It knows nothing of the command line:
// the caller hands it the store and the function that turns a request
// body into store parameters exactly as `msgq send --file` does, so the
// API accepts and refuses what the CLI does.
package api

import (
	"context"
	_ "embed"
	"log/slog"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// OpenAPI is the API's OpenAPI 3.1 document, served at PathOpenAPI; a copy
// is docs/openapi.json (a test keeps the two identical).
//
//go:embed openapi.json
var OpenAPI []byte

// Paths: a contract applications are written against.
const (
	PathMessages = "/v1/messages"
	PathBatch    = "/v1/messages/batch"
	PathOpenAPI  = "/v1/openapi.json"
)

// Item is one send as the parser made it: a single message or a
// verification challenge, never both.
type Item struct {
	Key       string
	Single    *store.EnqueueParams
	Challenge *store.ChallengeParams
}

// Error is a refusal as the client reads it: a machine-readable code, the
// field at fault when there is one, and a message for a person. Its JSON
// is the API's error object.
type Error struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Field      string `json:"field,omitempty"`
	Message    string `json:"message"`
	ExistingID string `json:"existing_id,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Error codes (the "code" of an error object; docs/api.md lists them).
const (
	CodeUnauthorized     = "unauthorized"
	CodeRateLimited      = "rate_limited"
	CodeBodyTooLarge     = "body_too_large"
	CodeMalformedJSON    = "malformed_json"
	CodeUnknownField     = "unknown_field"
	CodeInvalid          = "invalid"
	CodeKeyRequired      = "idempotency_key_required"
	CodeKeyInvalid       = "idempotency_key_invalid"
	CodeKeyReused        = "idempotency_key_reused"
	CodeNotFound         = "not_found"
	CodeStoreUnavailable = "store_unavailable"
	CodeInternal         = "internal"
	CodeBatchTooLarge    = "batch_too_large"
	CodeDuplicateKey     = "duplicate_key"
	CodeBusy             = "busy"
)

// Parser turns one send's JSON into an Item for tenant. key is the
// Idempotency-Key header's value; "" (a batch's item) means the body
// carries its own "key". A refusal is an *Error (400 for a body that is
// not JSON, 422 for content the CLI would refuse too).
type Parser func(tenant, key string, body []byte) (Item, *Error)

// Shower is what GET answers for a message: the object `msgq show -o json`
// prints for it.
type Shower func(ctx context.Context, st store.Store, m *store.Message) (any, error)

// Config configures a Server.
type Config struct {
	Store store.Store
	Parse Parser
	Show  Shower
	// MaxBody bounds a single send's body (POST /v1/messages) in bytes
	// (0: DefaultMaxBody): larger is 413, refused before it is read when
	// Content-Length says so, else as soon as the reader passes it. The
	// send's validation puts no bound on a text or a template parameter
	// (an email's text may be long), so this is the largest valid send.
	MaxBody int64
	// MaxBatchBody bounds a batch's body (POST /v1/messages/batch), which
	// carries up to MaxItems sends (0: DefaultMaxBatchBody); larger is 413
	// in the same way.
	MaxBatchBody int64
	// MaxPending bounds the bytes of request bodies held at once across
	// every request in flight, from the first byte read until the answer
	// is written (0: DefaultMaxPending). A body that does not fit gets 503
	// (code busy) with Retry-After, unread: by its Content-Length before a
	// byte is read, or, sent chunked, as its chunks outgrow the room left.
	// An eighth is kept for bodies of 64 KiB or less, so a flood of large
	// bodies does not crowd out ordinary sends.
	MaxPending int64
	// Rate and Burst are each key's request rate (per second) and burst
	// (0: DefaultRate, DefaultBurst): beyond them 429 with Retry-After.
	Rate  float64
	Burst int
	// KeyCache is how long a key's look-up is trusted (0: none, every
	// request reads the store). A revoked key is refused at most this
	// long after the revoke.
	KeyCache time.Duration
	// MaxItems bounds a batch's items (0: DefaultMaxItems).
	MaxItems int
	// MaxCommit bounds how many concurrent single sends one transaction
	// takes (0: 512).
	MaxCommit int
	// RetryAfter is what a 503 for an unreachable store asks the client
	// to wait (0: 2s); a 503 busy (no room in MaxPending) asks for 1s.
	RetryAfter time.Duration
	Log        *slog.Logger
	// ConnectionLost says a store error is a lost connection (503 rather
	// than 500); nil: none is.
	ConnectionLost func(error) bool
}

// Defaults of Config.
const (
	DefaultMaxBody = 1 << 20
	// DefaultMaxBatchBody: a full batch (DefaultMaxItems) of sends of
	// 4 KiB each, a WhatsApp text at its 4,096-character limit.
	DefaultMaxBatchBody = 4 << 20
	// DefaultMaxPending is the byte budget of bodies held at once: seven
	// sends at DefaultMaxBody beside the eighth kept for small bodies, or
	// one full batch; a send is a few hundred bytes in practice. A body is
	// held about three times over while it is parsed and written, so this
	// bounds the process's memory too (docs/api.md).
	DefaultMaxPending = 8 << 20
	DefaultRate       = 1000
	DefaultBurst      = 2000
	DefaultMaxItems   = 1000
	DefaultKeyCache   = 5 * time.Second
	// DefaultRetryAfter is the Retry-After of a 503: the store unreachable.
	DefaultRetryAfter = 2 * time.Second
)
