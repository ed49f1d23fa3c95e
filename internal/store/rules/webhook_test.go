package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/store"
)

func TestRetryRefusedSaysWhy(t *testing.T) {
	var inv *store.InvalidError
	if err := RetryRefused("ev1", true); !errors.As(err, &inv) || !strings.Contains(err.Error(), "processed without an error") {
		t.Fatalf("%v", err)
	}
	if err := RetryRefused("ev1", false); !errors.As(err, &inv) || !strings.Contains(err.Error(), "not processed yet") {
		t.Fatalf("%v", err)
	}
}

func TestApplyLimit(t *testing.T) {
	if ApplyLimit(&store.ApplyParams{}) != DefaultApplyLimit || ApplyLimit(&store.ApplyParams{Limit: -1}) != DefaultApplyLimit ||
		ApplyLimit(&store.ApplyParams{Limit: 7}) != 7 {
		t.Fatal("limits")
	}
}

func TestHeaders(t *testing.T) {
	if h, err := Headers(nil); err != nil || h != "{}" {
		t.Fatalf("%q, %v", h, err)
	}
	if h, err := Headers(map[string]string{"b": "2", "a": "1"}); err != nil || h != `{"a":"1","b":"2"}` {
		t.Fatalf("%q, %v", h, err)
	}
}
