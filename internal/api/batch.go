package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/msgq/msgq/internal/store"
)

// batchRequest is POST /v1/messages/batch's body.
type batchRequest struct {
	Messages []json.RawMessage `json:"messages"`
}

// BatchResult is one item's outcome, in input order: `msgq send --file`'s
// result per line, with the status a single POST of the item would have
// had.
type BatchResult struct {
	Index      int    `json:"index"`
	Result     string `json:"result"` // enqueued | replayed | revived | invalid | conflict
	Status     int    `json:"status"`
	Key        string `json:"key,omitempty"`
	ID         string `json:"id,omitempty"`
	State      string `json:"state,omitempty"`
	Code       string `json:"code,omitempty"`
	Field      string `json:"field,omitempty"`
	Message    string `json:"message,omitempty"`
	ExistingID string `json:"existing_id,omitempty"`
}

// postBatch writes many sends, each with its own key: the good single
// sends in one transaction, each challenge in its own, and answers 200
// with a result per item once they are durable. A bad item is refused
// alone; the store failing refuses the whole batch (nothing of it was
// written; sending it again is safe).
func (s *Server) postBatch(w http.ResponseWriter, r *http.Request, k *store.APIKey) {
	body, release, ok := s.readBody(w, r, s.cfg.MaxBatchBody)
	if !ok {
		return
	}
	defer release()
	var req batchRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: `the body must be {"messages": [...]}: ` + err.Error()})
		return
	}
	// The envelope alone: a duplicate key inside an item is that item's
	// refusal (the parser's), not the batch's.
	if path, dup := duplicateKey(body, 1); dup {
		writeError(w, duplicateKeyError(path))
		return
	}
	switch {
	case len(req.Messages) == 0:
		writeError(w, &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: "messages", Message: "give at least one message"})
		return
	case len(req.Messages) > s.cfg.MaxItems:
		writeError(w, &Error{Status: http.StatusUnprocessableEntity, Code: CodeBatchTooLarge, Field: "messages",
			Message: fmt.Sprintf("%d messages; at most %d in one batch", len(req.Messages), s.cfg.MaxItems)})
		return
	}
	results := make([]BatchResult, len(req.Messages))
	var singles []store.EnqueueParams
	var at []int
	var challenges []int
	items := make([]Item, len(req.Messages))
	for i, raw := range req.Messages {
		results[i].Index = i
		it, perr := s.cfg.Parse(k.Tenant, "", raw)
		if perr != nil {
			results[i].fail(perr)
			continue
		}
		items[i] = it
		results[i].Key = it.Key
		if it.Challenge != nil {
			challenges = append(challenges, i)
			continue
		}
		singles = append(singles, *it.Single)
		at = append(at, i)
	}
	if len(singles) > 0 {
		res, err := s.cfg.Store.MessageEnqueueMany(r.Context(), singles)
		if err != nil {
			s.storeError(w, err)
			return
		}
		for j, i := range at {
			results[i].set(result(res[j]))
		}
	}
	for _, i := range challenges {
		out, err := s.send(r.Context(), items[i])
		if err != nil {
			s.storeError(w, err)
			return
		}
		results[i].set(out)
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

func (b *BatchResult) fail(e *Error) {
	b.Status, b.Code, b.Field, b.Message, b.ExistingID = e.Status, e.Code, e.Field, e.Message, e.ExistingID
	b.Result = "invalid"
	if e.Status == http.StatusConflict {
		b.Result = "conflict"
	}
}

func (b *BatchResult) set(s sent) {
	if s.err != nil {
		b.fail(s.err)
		return
	}
	m := s.out
	b.ID, b.State, b.Key = m.ID, string(m.State), m.Key
	switch {
	case m.Revived:
		b.Result, b.Status = "revived", http.StatusAccepted
	case m.Replayed:
		b.Result, b.Status = "replayed", http.StatusOK
	default:
		b.Result, b.Status = "enqueued", http.StatusAccepted
	}
}
