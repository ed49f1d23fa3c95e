package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every API key, so that one pasted into a log, a
// ticket or a repository is recognised for what it is (secret scanners
// match on it).
const TokenPrefix = "msgq_"

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewToken makes a new API key: 256 random bits after TokenPrefix, and the
// hash the store keeps of it.
func NewToken() (token, hash string) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	token = TokenPrefix + tokenEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken is what the store keeps of a token: its SHA-256, in hex. A
// plain fast hash is right here, unlike for passwords: the token is 256
// random bits, so there is nothing to guess from the hash and a slow,
// salted hash (bcrypt, argon2) would only slow every request down. An
// unsalted hash also lets the store find the key by it with an index.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// LooksLikeToken says s has the shape of a token (before any look-up).
func LooksLikeToken(s string) bool {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(rest) != 52 {
		return false
	}
	_, err := tokenEncoding.DecodeString(rest)
	return err == nil
}
