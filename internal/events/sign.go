// Package events delivers the store's status events (the outbox the
// stores' triggers write, docs/events.md) to the applications' endpoints,
// signed the Standard Webhooks way, at least once and in order per
// message.
package events

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// SecretPrefix starts every signing secret (Standard Webhooks' whsec_).
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: whsec_ and the base64 of 32
// random bytes (Standard Webhooks asks for 24 to 64).
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("events: new secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:]), nil
}

// NewEndpointID returns a fresh endpoint id: ep_ and 16 hex digits.
func NewEndpointID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("events: new endpoint id: %w", err)
	}
	return "ep_" + hex.EncodeToString(b[:]), nil
}

// Sign is the webhook-signature header of body: "v1," and the base64 of
// HMAC-SHA256 under the secret's bytes of id.timestamp.body.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return "", fmt.Errorf("events: the signing secret is not whsec_ and base64")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// SetHeaders puts the three Standard Webhooks headers of one delivery
// attempt on h: the event's id (the same on every redelivery, so the
// application can deduplicate), the attempt's time and its signature.
func SetHeaders(h http.Header, secret, id string, ts time.Time, body []byte) error {
	sig, err := Sign(secret, id, ts, body)
	if err != nil {
		return err
	}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return nil
}

// envelope is the event as the application receives it; field names are
// a contract (docs/events.md).
type envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Body is the JSON an event is delivered as. It depends only on the
// stored event, so a redelivery sends the same bytes.
func Body(e *store.Event) ([]byte, error) {
	// Compacted: the stores' JSON functions space it differently.
	var data bytes.Buffer
	if err := json.Compact(&data, []byte(e.Data)); err != nil {
		return nil, fmt.Errorf("events: event %s: data is not JSON: %w", e.ID, err)
	}
	return json.Marshal(envelope{ID: e.ID, Type: e.Type, Timestamp: e.CreatedAt.UTC().Format(time.RFC3339Nano), Data: data.Bytes()})
}
