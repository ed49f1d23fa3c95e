package cli

import (
	"github.com/msgq/msgq/internal/duration"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// durationValue gives a duration flag msgq's grammar. It wraps the value
// the flag was defined with (pflag's own), so defaults, help and the
// variable it sets stay as they were; only what Set accepts grows.
type durationValue struct{ pflag.Value }

func (v durationValue) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return err
	}
	// A Go duration's String is always one time.ParseDuration reads back.
	return v.Value.Set(d.String())
}

// oneDurationGrammar makes every duration flag of the tree read
// duration.Parse's grammar, so that 1d means the same to stats --window as
// to purge --older-than, including flags added later.
func oneDurationGrammar(c *cobra.Command) {
	wrap := func(f *pflag.Flag) {
		if f.Value.Type() == "duration" {
			if _, done := f.Value.(durationValue); !done {
				f.Value = durationValue{f.Value}
			}
		}
	}
	c.Flags().VisitAll(wrap)
	c.PersistentFlags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		oneDurationGrammar(sub)
	}
}
