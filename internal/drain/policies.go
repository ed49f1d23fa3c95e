package drain

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// The drain's store-backed policies, for Config.WindowClosed and
// Config.TemplateHeld: what msgq drain runs with (internal/cli/cmd_drain.go);
// tests of the drain loop give their own.

// WindowStore is what StoreWindow reads: when a recipient last wrote to
// an identity.
type WindowStore interface {
	ServiceWindow(ctx context.Context, identity, recipient string) (time.Time, error)
}

// StoreWindow says whether an identity's customer-service window with a
// recipient is closed: the recipient has not written within the
// identity's window (windowOf; zero: none enforced, never closed), by
// now, the store's clock as the drain knows it. A store error counts as
// open: the provider's own refusal (WhatsApp 131047) is the backstop,
// and it cannot send anything twice.
func StoreWindow(st WindowStore, windowOf func(identity string) time.Duration, now func() time.Time, log *slog.Logger) func(ctx context.Context, identity, recipient string) bool {
	return func(ctx context.Context, identity, recipient string) bool {
		w := windowOf(identity)
		if w <= 0 {
			return false
		}
		last, err := st.ServiceWindow(ctx, identity, recipient)
		if err != nil {
			log.Warn("drain: reading the customer-service window failed; sending as if open", "identity", identity, "err", err)
			return false
		}
		return last.IsZero() || !now().Before(last.Add(w))
	}
}

// HoldStore is what StoreTemplateHolds reads: the templates a provider
// reported unusable (msgq webhook notices).
type HoldStore interface {
	TemplateHolds(ctx context.Context) ([]store.TemplateHold, error)
}

// HoldsReadEvery is how often StoreTemplateHolds reads the holds again: a
// hold is rare, and a read per send would cost every send a query.
const HoldsReadEvery = 5 * time.Second

// StoreTemplateHolds says whether a provider reported a template unusable
// for an identity, from the store's holds, read at most every
// HoldsReadEvery by now. A store error counts as not held (the last holds
// read stay in use): the provider refuses a paused template itself
// (132015), and that sends nothing.
func StoreTemplateHolds(st HoldStore, now func() time.Time, log *slog.Logger) func(ctx context.Context, identity, template, lang string) (string, bool) {
	var (
		mu    sync.Mutex
		read  time.Time
		holds []store.TemplateHold
	)
	return func(ctx context.Context, identity, template, lang string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if t := now(); read.IsZero() || t.Sub(read) > HoldsReadEvery || t.Before(read) {
			hs, err := st.TemplateHolds(ctx)
			if err != nil {
				log.Warn("drain: reading template holds failed; sending as if none", "err", err)
			} else {
				holds, read = hs, t
			}
		}
		for _, h := range holds {
			if h.Identity == identity && h.Template == template && (h.Lang == "" || h.Lang == lang) {
				return h.Lang, true
			}
		}
		return "", false
	}
}
