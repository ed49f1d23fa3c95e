// Package cli is msgq's command line: one file per command, each with an
// options struct validated before anything runs, all output through the
// IOStreams passed in, and errors mapped to exit codes in exit.go alone.
package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

// Main runs msgq with the process's arguments and streams and returns the
// exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks for a clean stop; a second one kills, as
	// people expect of a second Ctrl-C.
	context.AfterFunc(ctx, stop)
	return Run(ctx, os.Args[1:], System())
}

// Run executes one msgq invocation. It builds a fresh command tree each
// time, so tests may run many at once.
func Run(ctx context.Context, args []string, ios *IOStreams) int {
	now, err := hostClock(os.Getenv)
	if err != nil {
		fmt.Fprintf(ios.Err, "msgq: %s\n", err)
		return exitCode(err)
	}
	a := &app{ios: ios, now: now}
	root := newRootCmd(a)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	if a.closeStore != nil {
		if cerr := a.closeStore(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err == nil {
		return ExitOK
	}
	err = wrapUsage(err)
	// Every error line is cleaned of the store's password, whichever
	// command (or driver) wrote the message.
	msg := storeopen.RedactQuotedURLs(err.Error())
	if a.cfg != nil {
		msg = storeopen.RedactText(a.cfg.Store, msg)
	}
	fmt.Fprintf(ios.Err, "msgq: %s\n", oneLine(msg))
	return exitCode(err)
}

// wrapUsage makes cobra's unknown-command and unknown-flag errors, which
// it reports as plain errors, usage errors (exit 2).
func wrapUsage(err error) error {
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") {
		return &usageError{err}
	}
	return err
}

// oneLine keeps an error to one line, as the contract promises.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// app is what commands share: the streams, the resolved configuration, the
// logger and the store, opened on first use.
type app struct {
	ios        *IOStreams
	cfg        *config
	log        *slog.Logger
	now        func() time.Time
	st         store.Store
	closeStore func() error
	// parsed, when set, receives a command's validated options in place of
	// running it, so tests can check flag parsing apart from behaviour
	// (internal/cli/flags_test.go): nothing is opened or written.
	parsed func(opts any) error
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "msgq",
		Short: "An outbound message queue that sends each message at most once",
		Long: `msgq queues outbound messages (WhatsApp, SMS, HTTP messaging APIs) and sends each
logical send at most once. Every send that may have gone out stays visible until
someone decides what happened.

Settings come from, in order: flags, MSGQ_* environment variables (MSGQ_STORE,
MSGQ_OUTPUT, MSGQ_LOG_LEVEL, MSGQ_TENANT, MSGQ_DEFAULT_IDENTITY, MSGQ_REGION),
the config file (--config, $MSGQ_CONFIG, or ~/.config/msgq/config.yaml), and
defaults. The default store is $XDG_DATA_HOME/msgq/msgq.db
(~/.local/share/msgq/msgq.db).

` + exitStatusHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			a.cfg = cfg
			a.log = slog.New(&redactingHandler{slog.NewTextHandler(a.ios.Err, &slog.HandlerOptions{Level: cfg.LogLevel}), cfg.Store})
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.String("store", "", "the store: sqlite:PATH (default: the user's data directory) [MSGQ_STORE]")
	pf.String("config", "", "config file (YAML) [MSGQ_CONFIG]")
	pf.StringP("output", "o", outTable, "output format: table or json (stats also: prometheus) [MSGQ_OUTPUT]")
	pf.String("log-level", "info", "diagnostics on stderr: debug, info, warn or error [MSGQ_LOG_LEVEL]")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.SetIn(a.ios.In)
	root.SetOut(a.ios.Out)
	root.SetErr(a.ios.Err)
	root.AddCommand(
		newSendCmd(a),
		newListCmd(a),
		newShowCmd(a),
		newMigrateCmd(a),
		newVersionCmd(a),
		newSimCmd(a),
		newDrainCmd(a),
		newIdentitiesCmd(a),
		newStuckCmd(a),
		newResolveCmd(a),
		newResendCmd(a),
		newCancelCmd(a),
		newReconcileCmd(a),
		newStatsCmd(a),
		newHealthCmd(a),
		newPurgeCmd(a),
		newWebhookCmd(a),
		newInboxCmd(a),
		newOptOutsCmd(a),
		newAPIKeysCmd(a),
		newServeCmd(a),
		newEndpointsCmd(a),
	)
	oneDurationGrammar(root)
	completeFlagValues(root)
	return root
}

// store opens the configured store once per invocation.
func (a *app) store(ctx context.Context) (store.Store, error) {
	if a.st != nil {
		return a.st, nil
	}
	st, err := storeopen.Open(ctx, a.cfg.Store, storeopen.Options{Log: a.log, Now: a.now})
	if err != nil {
		return nil, err
	}
	a.st, a.closeStore = st, st.Close
	return st, nil
}

// exactArgs is cobra.ExactArgs with a usage error, so a missing argument
// exits 2 like every other bad input.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}
