package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/msgq/msgq/internal/storeopen"
)

// redactingHandler cleans every log line of the store's password: the
// message and every attribute a string, error or Stringer turns into.
// Nothing msgq logs should carry it; this is the net under that.
type redactingHandler struct {
	slog.Handler
	store string
}

func (h *redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, storeopen.RedactText(h.store, r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h *redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, storeopen.RedactText(h.store, v.String()))
	case slog.KindGroup:
		as := v.Group()
		clean := make([]any, 0, len(as))
		for _, g := range as {
			clean = append(clean, h.attr(g))
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, storeopen.RedactText(h.store, x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, storeopen.RedactText(h.store, x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		clean = append(clean, h.attr(a))
	}
	return &redactingHandler{h.Handler.WithAttrs(clean), h.store}
}

func (h *redactingHandler) WithGroup(name string) slog.Handler {
	return &redactingHandler{h.Handler.WithGroup(name), h.store}
}
