// Package kinds is the one list of the providers msgq knows. It imports
// each provider package, so that nothing else has to: the CLI, the webhook
// receiver and processor, and reconcile all find a provider here by name.
package kinds

import (
	"slices"
	"strings"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/provider/smtp"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/sim"
)

// All are the kinds, in the order messages list them. Adding a provider is
// one line here (docs/providers.md, "Adding a provider").
var All = []*provider.Kind{
	&whatsapp.Kind,
	&httpapi.Kind,
	&sim.Kind,
	&twilio.Kind,
	&smtp.Kind,
}

// ByName returns the kind called name.
func ByName(name string) (*provider.Kind, bool) {
	for _, k := range All {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// Names lists the kinds' names as a message does: "whatsapp, http or sim".
func Names() string {
	names := make([]string, len(All))
	for i, k := range All {
		names[i] = k.Name
	}
	return orList(names)
}

// Formats are the webhook formats the kinds speak, in the order of All
// and each once (the simulator speaks the http API's): the names stored
// deliveries carry as their provider, and msgq webhook replay's --provider.
func Formats() []string {
	var out []string
	for _, k := range All {
		if k.Webhook != nil && !slices.Contains(out, k.Webhook.Name) {
			out = append(out, k.Webhook.Name)
		}
	}
	return out
}

// ByFormat returns the first kind that speaks the webhook format (the
// simulator speaks the http API's: its Parse is the same), nil for none.
func ByFormat(format string) *provider.Kind {
	for _, k := range All {
		if k.Webhook != nil && k.Webhook.Name == format {
			return k
		}
	}
	return nil
}

// Channels lists every channel some kind sends on, as a message does:
// "whatsapp or sms".
func Channels() []string {
	var out []string
	for _, k := range All {
		for _, c := range k.Channels {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// OrList joins words as "a, b or c".
func OrList(words []string) string { return orList(words) }

func orList(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
