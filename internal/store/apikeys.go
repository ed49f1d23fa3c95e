package store

import (
	"context"
	"time"
)

// APIKey is one key of `msgq serve`'s API (docs/api.md): bound to one
// tenant, kept as the hash of the token alone. Field names in JSON are a
// contract (`msgq api-keys list -o json`).
type APIKey struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// APIKeyParams is a key to create: the hash of its token (hex), never the
// token itself.
type APIKeyParams struct {
	Tenant string
	Name   string
	Hash   string
}

// Validate checks the parameters.
func (p *APIKeyParams) Validate() error {
	switch {
	case !ValidKey(p.Tenant):
		return &InvalidError{Field: "tenant", Msg: "must be 1 to 64 characters of A-Za-z0-9._:-"}
	case !ValidKey(p.Name):
		return &InvalidError{Field: "name", Msg: "must be 1 to 64 characters of A-Za-z0-9._:-"}
	case len(p.Hash) != 64:
		return &InvalidError{Field: "hash", Msg: "must be a hex SHA-256"}
	}
	return nil
}

// APIKeys is what a store keeps of API keys. A name is unique among the
// keys not revoked, so that `api-keys revoke NAME` means one key; a
// revoked key's name may be used again.
type APIKeys interface {
	// APIKeyCreate records a new key. Errors: *InvalidError; ErrConflict
	// when a key not revoked has the name.
	APIKeyCreate(ctx context.Context, p APIKeyParams) (*APIKey, error)
	// APIKeyList lists every key (revoked ones too), oldest first.
	APIKeyList(ctx context.Context) ([]APIKey, error)
	// APIKeyRevoke revokes the key whose id or, failing that, whose name
	// among the keys not revoked is ref, and returns it. Revoking a
	// revoked key (by id) changes nothing. Errors: ErrNotFound.
	APIKeyRevoke(ctx context.Context, ref string) (*APIKey, error)
	// APIKeyLookup returns the key not revoked whose hash is hash.
	// Errors: ErrNotFound (no such key, or it was revoked).
	APIKeyLookup(ctx context.Context, hash string) (*APIKey, error)
	// APIKeyUsed records that the key id was used now (last_used_at).
	APIKeyUsed(ctx context.Context, id string) error
}
