package cli

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/sms"
	"github.com/msgq/msgq/internal/store"
)

// smsInfo is what `send` and `show` say about an SMS text's cost: the
// segments it is sent (and billed) in and the encoding that decides them.
// Field names are a contract (-o json).
type smsInfo struct {
	Segments int    `json:"segments"`
	Encoding string `json:"encoding"`
}

// smsCost is m's smsInfo, nil unless it is an SMS with a text.
func smsCost(m *store.Message) *smsInfo {
	if m.Channel != store.ChannelSMS || m.Payload == nil || m.Payload.Text == "" {
		return nil
	}
	n, enc := sms.Segments(m.Payload.Text)
	return &smsInfo{Segments: n, Encoding: enc}
}

func (i *smsInfo) String() string {
	if i.Segments == 1 {
		return "1 segment (" + i.Encoding + ")"
	}
	return fmt.Sprintf("%d segments (%s)", i.Segments, i.Encoding)
}

// parseWhen reads an RFC 3339 time or a duration from now ("10m").
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := duration.Parse(v); err == nil {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 10m or 1d", v)
}
