package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// phoneMetadataSQL fills phone_metadata, the table enqueue() reads phone
// numbers by (migrations/0017_sql_enqueue.sql), from the phonenumbers
// library msgq is built with. It is generated (TestPhoneMetadataIsCurrent
// -update), so it follows the library's releases.
//
//go:embed phone_metadata.sql
var phoneMetadataSQL string

// phoneMetadataHash names phoneMetadataSQL's contents in
// phone_metadata_version: a schema whose hash differs is loaded again.
var phoneMetadataHash = func() string {
	sum := sha256.Sum256([]byte(phoneMetadataSQL))
	return hex.EncodeToString(sum[:])
}()

// phoneLibraryLine starts the line of phoneMetadataSQL that names the
// library release it was generated from.
const phoneLibraryLine = "-- phonenumbers "

// phoneLibrary is the release phoneMetadataSQL was generated from.
var phoneLibrary = func() string {
	for _, line := range strings.Split(phoneMetadataSQL, "\n") {
		if v, ok := strings.CutPrefix(line, phoneLibraryLine); ok {
			return v
		}
	}
	return ""
}()

// releaseOlder says release a (v1.2.3) is older than b; an unreadable one
// is the oldest.
func releaseOlder(a, b string) bool {
	parse := func(v string) []int {
		v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "-")
		var out []int
		for _, p := range strings.Split(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(parse(a), parse(b)) < 0
}

// phoneMetadataCurrent says the schema's phone_metadata is this build's,
// or a newer library release's (kept: see phone_metadata_version). A
// schema without the table (before 0017) is not current.
func phoneMetadataCurrent(ctx context.Context, q rowQuerier) (bool, error) {
	var lib, h string
	err := q.QueryRow(ctx, "SELECT library, hash FROM phone_metadata_version").Scan(&lib, &h)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return false, nil
	case err != nil:
		return false, fmt.Errorf("postgres: read the phone metadata version: %w", err)
	}
	return h == phoneMetadataHash || releaseOlder(phoneLibrary, lib), nil
}

// loadPhoneMetadata replaces phone_metadata's rows with this build's, in
// tx (Migrate's, which holds the migration lock).
func loadPhoneMetadata(ctx context.Context, tx pgx.Tx) error {
	if ok, err := phoneMetadataCurrent(ctx, tx); err != nil || ok {
		return err
	}
	if _, err := tx.Exec(ctx, phoneMetadataSQL); err != nil {
		return fmt.Errorf("postgres: load the phone metadata: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO phone_metadata_version (library, hash) VALUES ($1, $2) "+
		"ON CONFLICT (one) DO UPDATE SET library = excluded.library, hash = excluded.hash",
		phoneLibrary, phoneMetadataHash); err != nil {
		return fmt.Errorf("postgres: load the phone metadata: %w", err)
	}
	return nil
}
