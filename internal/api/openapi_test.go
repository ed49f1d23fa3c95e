package api

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenAPIDocIsTheEmbeddedOne: docs/openapi.json is the document serve
// embeds and answers, byte for byte, and it is JSON of OpenAPI 3.1.
func TestOpenAPIDocIsTheEmbeddedOne(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, OpenAPI) {
		t.Fatal("docs/openapi.json differs from internal/api/openapi.json: copy internal/api/openapi.json to docs/")
	}
	var d struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(OpenAPI, &d); err != nil || d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json: version %q, %v", d.OpenAPI, err)
	}
}
