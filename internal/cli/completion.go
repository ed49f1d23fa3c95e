package cli

import (
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// completeFlagValues registers the completion of flag values over the
// whole tree (after it is built, so that every command with a --state or
// --identity gets the same): states, identities (from the config the
// command line names), lanes, channels, output formats and log levels.
// The shell scripts of msgq completion bash|zsh|fish|powershell ask for them.
func completeFlagValues(root *cobra.Command) {
	fixed := func(vs ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(vs, cobra.ShellCompDirectiveNoFileComp)
	}
	states := make([]string, 0, len(state.All))
	for _, s := range state.All {
		states = append(states, string(s))
	}
	byName := map[string]cobra.CompletionFunc{
		"state":    fixed(states...),
		"identity": completeIdentities,
		"lane":     fixed(store.LaneReply, store.LaneBulk),
		"channel":  fixed(store.ChannelWhatsApp, store.ChannelSMS),
	}
	// Flags whose values differ by command.
	byCommand := map[string]map[string]cobra.CompletionFunc{
		"msgq stuck":          {"state": fixed(string(state.Sending), string(state.Unknown))},
		"msgq resolve":        {"as": fixed("sent", "failed")},
		"msgq webhook replay": {"provider": fixed(kinds.Formats()...)},
	}
	_ = root.RegisterFlagCompletionFunc("output", completeOutputs)
	_ = root.RegisterFlagCompletionFunc("log-level", fixed("debug", "info", "warn", "error"))
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, fn := range byName {
			if fn2, ok := byCommand[c.CommandPath()][name]; ok {
				fn = fn2
			}
			if c.LocalNonPersistentFlags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, fn)
			}
		}
		for name, fn := range byCommand[c.CommandPath()] {
			if _, done := byName[name]; !done && c.LocalNonPersistentFlags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, fn)
			}
		}
		switch c.CommandPath() {
		case "msgq identities pause", "msgq identities resume":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeIdentities(cmd, args, toComplete)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeIdentities offers the identities of the configuration this
// command line would use (--config, $MSGQ_CONFIG or the default file).
func completeIdentities(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for n := range cfg.Identities {
		if strings.HasPrefix(n, toComplete) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeOutputs offers the formats the command takes: table and json,
// and those its outputsAnnotation adds (stats: prometheus).
func completeOutputs(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	return slices.Concat([]string{outTable, outJSON}, strings.Fields(cmd.Annotations[outputsAnnotation])), cobra.ShellCompDirectiveNoFileComp
}
