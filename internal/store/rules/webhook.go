package rules

import (
	"encoding/json"

	"github.com/msgq/msgq/internal/store"
)

// RetryRefused is WebhookRetry's refusal for an event that exists but
// has nothing to retry: it was read without an error (processed), or not
// read yet.
func RetryRefused(id string, processed bool) error {
	if processed {
		return &store.InvalidError{Msg: "webhook event " + id + " was processed without an error: nothing to retry"}
	}
	return &store.InvalidError{Msg: "webhook event " + id + " is not processed yet: nothing to retry"}
}

// DefaultApplyLimit bounds an EvidenceApply without a limit.
const DefaultApplyLimit = 1000

// ApplyLimit is how many statuses an EvidenceApply by p applies at most.
func ApplyLimit(p *store.ApplyParams) int {
	if p.Limit <= 0 {
		return DefaultApplyLimit
	}
	return p.Limit
}

// Headers is a stored event's headers column: their JSON object, "{}"
// for none.
func Headers(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}
