package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/msgq/msgq/internal/store"
)

func hashOf(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// testAPIKeys: keys are created with a hash, looked up by it while not
// revoked, listed without it, revoked by id or by live name, and a live
// name is unique.
func testAPIKeys(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	a, err := s.APIKeyCreate(ctx, store.APIKeyParams{Tenant: "shop", Name: "checkout", Hash: hashOf("a")})
	if err != nil || a.ID == "" || a.Tenant != "shop" || a.Name != "checkout" || a.CreatedAt.IsZero() || a.RevokedAt != nil || a.LastUsedAt != nil {
		t.Fatalf("APIKeyCreate = %+v, %v", a, err)
	}
	if _, err := s.APIKeyCreate(ctx, store.APIKeyParams{Tenant: "other", Name: "checkout", Hash: hashOf("b")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second live key named checkout: %v, want ErrConflict", err)
	}
	var ie *store.InvalidError
	for _, p := range []store.APIKeyParams{{Tenant: "", Name: "x", Hash: hashOf("c")}, {Tenant: "shop", Name: "bad name", Hash: hashOf("c")},
		{Tenant: "shop", Name: "x", Hash: "abc"}} {
		if _, err := s.APIKeyCreate(ctx, p); !errors.As(err, &ie) {
			t.Fatalf("APIKeyCreate(%+v) = %v, want *InvalidError", p, err)
		}
	}
	b, err := s.APIKeyCreate(ctx, store.APIKeyParams{Tenant: "billing", Name: "invoices", Hash: hashOf("b")})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := s.APIKeyLookup(ctx, hashOf("a")); err != nil || k.ID != a.ID || k.Tenant != "shop" {
		t.Fatalf("APIKeyLookup(a) = %+v, %v", k, err)
	}
	if _, err := s.APIKeyLookup(ctx, hashOf("nobody")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("APIKeyLookup(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.APIKeyUsed(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	list, err := s.APIKeyList(ctx)
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[0].LastUsedAt == nil || list[1].LastUsedAt != nil {
		t.Fatalf("APIKeyList = %+v, %v", list, err)
	}
	// By name, then by id again: the second changes nothing.
	r, err := s.APIKeyRevoke(ctx, "checkout")
	if err != nil || r.ID != a.ID || r.RevokedAt == nil {
		t.Fatalf("APIKeyRevoke(checkout) = %+v, %v", r, err)
	}
	again, err := s.APIKeyRevoke(ctx, a.ID)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(*r.RevokedAt) {
		t.Fatalf("revoking a revoked key = %+v, %v; want it unchanged", again, err)
	}
	if _, err := s.APIKeyRevoke(ctx, "checkout"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoking by the name of a revoked key = %v, want ErrNotFound", err)
	}
	if _, err := s.APIKeyLookup(ctx, hashOf("a")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("APIKeyLookup(revoked) = %v, want ErrNotFound", err)
	}
	// The name is free again once its key is revoked.
	c, err := s.APIKeyCreate(ctx, store.APIKeyParams{Tenant: "shop", Name: "checkout", Hash: hashOf("c")})
	if err != nil || c.ID == a.ID {
		t.Fatalf("re-creating checkout after revoking it: %+v, %v", c, err)
	}
	if k, err := s.APIKeyRevoke(ctx, b.ID); err != nil || k.Name != "invoices" {
		t.Fatalf("APIKeyRevoke(id) = %+v, %v", k, err)
	}
}
