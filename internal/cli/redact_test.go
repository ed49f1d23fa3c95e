package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestLogLinesAreCleanedOfTheStorePassword: the logger every command uses
// cleans messages and attributes.
func TestLogLinesAreCleanedOfTheStorePassword(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	store := "postgres://u@h/db?password=HUNTER2"
	log := slog.New(&redactingHandler{slog.NewTextHandler(&buf, nil), store})
	log.With("store", store).Warn("open "+store, "err", errors.New("bad password HUNTER2"), slog.Group("g", "s", "HUNTER2"))
	if strings.Contains(buf.String(), "HUNTER2") || !strings.Contains(buf.String(), "password=xxxxx") {
		t.Fatalf("log line: %s", buf.String())
	}
}
