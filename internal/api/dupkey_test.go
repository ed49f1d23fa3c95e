package api

import (
	"encoding/json"
	"testing"
)

func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct {
		body, path string
	}{
		{`{"to":"+15551234567","text":"hi"}`, ""},
		{`{"to":"a","to":"b"}`, "to"},
		{`{"to":"a","TO":"b"}`, "TO"},
		{`{"t\u006f":"a","to":"b"}`, "to"},
		{`{"text":"a \"to\": b","to":"x"}`, ""},
		{`{"template":{"name":"a","parameters":["x","y"],"name":"b"}}`, "template.name"},
		{`{"steps":[{"to":"a"},{"to":"b","after":"1m","after":"2m"}]}`, "steps[1].after"},
		{`{"a":{"x":1},"b":{"x":2}}`, ""},
		{`{"a":[[{"k":1,"k":2}]]}`, "a[0][0].k"},
		{` { "x" : [ 1 , true , null , -2.5e3 , "s" ] , "y" : { } , "x" : 0 } `, "x"},
		// Kelvin sign: encoding/json folds it to k.
		{`{"k":1,"\u212a":2}`, "\u212a"},
		{`[]`, ""},
		{`"s"`, ""},
	} {
		if !json.Valid([]byte(c.body)) {
			t.Fatalf("%s: not JSON", c.body)
		}
		path, dup := DuplicateKey([]byte(c.body))
		if dup != (c.path != "") || path != c.path {
			t.Errorf("DuplicateKey(%s) = %q, %v; want %q", c.body, path, dup, c.path)
		}
	}
	// A batch's envelope is checked alone; its items are the parser's.
	if p, dup := duplicateKey([]byte(`{"messages":[{"to":"a","to":"b"}]}`), 1); dup {
		t.Errorf("envelope check found %q inside an item", p)
	}
	if p, dup := duplicateKey([]byte(`{"messages":[],"messages":[{}]}`), 1); !dup || p != "messages" {
		t.Errorf("envelope check: %q, %v; want messages", p, dup)
	}
}

// TestDuplicateKeyFoldsAsEncodingJSON: the keys DuplicateKey calls the
// same are the ones encoding/json decodes into the same field.
func TestDuplicateKeyFoldsAsEncodingJSON(t *testing.T) {
	type fields struct {
		K     string `json:"k"`
		Sigma string `json:"σ"`
	}
	for _, c := range []struct{ field, variant string }{
		{"k", "K"}, {"k", "\u212a"}, {"σ", "Σ"}, {"σ", "ς"},
	} {
		var v fields
		if err := json.Unmarshal([]byte(`{"`+c.variant+`":"x"}`), &v); err != nil {
			t.Fatal(err)
		}
		if got := map[string]string{"k": v.K, "σ": v.Sigma}[c.field]; got != "x" {
			t.Fatalf("encoding/json did not decode %s into field %s", c.variant, c.field)
		}
		body := `{"` + c.field + `":"a","` + c.variant + `":"x"}`
		if _, found := DuplicateKey([]byte(body)); !found {
			t.Errorf("%s: encoding/json decodes both keys into one field; DuplicateKey found no duplicate", body)
		}
	}
}
