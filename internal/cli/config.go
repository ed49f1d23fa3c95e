package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/identities"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// config is every setting a command reads, resolved in one place with one
// precedence: flag > MSGQ_* environment variable > config file > default.
type config struct {
	Store           string // sqlite:PATH or a postgres:// URL
	Output          string // table | json
	LogLevel        slog.Level
	Tenant          string
	DefaultIdentity string
	Region          string // for local phone numbers
	ConfigFile      string // the file read, if any
	// Health are health's thresholds as written ("" when not set); the
	// health command parses them (cmd_health.go).
	Health health.Settings
	// ClockWarn is the clock offset past which drain, reconcile and
	// webhook serve warn, as written (clock.go parses it).
	ClockWarn string
	// Identities are the sending identities, the built-in sim included.
	Identities map[string]*identities.Identity
}

// settings maps each config key to the flag that overrides it. The
// environment variable is MSGQ_ and the key in upper case.
var settings = []struct{ key, flag, def string }{
	{"store", "store", ""},
	{"output", "output", outTable},
	{"log_level", "log-level", "info"},
	{"tenant", "tenant", "default"},
	{"default_identity", "identity", "sim"},
	{"region", "region", ""},
	// health's thresholds: a section of the file (health: {max_stuck: 0}),
	// MSGQ_HEALTH_MAX_STUCK in the environment.
	{"health.max_oldest_queued", "max-oldest-queued", ""},
	{"health.max_stuck", "max-stuck", ""},
	{"health.max_unknown", "max-unknown", ""},
	{"health.max_sending_past_lease", "max-sending-past-lease", ""},
	// health's thresholds on the vital signs (stats_vitals.go) and the
	// spans they are measured over.
	{"health.max_key_conflicts", "max-key-conflicts", ""},
	{"health.max_sending_long", "max-sending-long", ""},
	{"health.max_failed_permanent", "max-failed-permanent", ""},
	{"health.max_failed_expired", "max-failed-expired", ""},
	{"health.max_failed_exhausted", "max-failed-exhausted", ""},
	{"health.max_failed_canceled", "max-failed-canceled", ""},
	{"health.max_failed_resolved", "max-failed-resolved", ""},
	{"health.max_resends", "max-resends", ""},
	{"health.max_maybe_sent", "max-maybe-sent", ""},
	{"health.max_sent_without_progress", "max-sent-without-progress", ""},
	{"health.max_unsendable", "max-unsendable", ""},
	{"health.max_challenges_blocked", "max-challenges-blocked", ""},
	{"health.max_challenges_expired", "max-challenges-expired", ""},
	{"health.max_challenge_unknown_past_deadline", "max-challenge-unknown-past-deadline", ""},
	{"health.max_challenge_first_delivery_p95", "max-challenge-first-delivery-p95", ""},
	{"health.window", "window", ""},
	{"health.no_progress_after", "no-progress-after", ""},
	{"health.max_clock_offset", "max-clock-offset", ""},
	{"health.max_daily_recipients_share", "max-daily-recipients-share", ""},
	// drain, reconcile and webhook serve: warn past this clock offset.
	{"clock_warn", clockWarnFlag, defaultClockWarn.String()},
}

// loadConfig resolves the settings for the command about to run.
func loadConfig(cmd *cobra.Command) (*config, error) {
	v := viper.New()
	v.SetEnvPrefix("MSGQ")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	for _, s := range settings {
		v.SetDefault(s.key, s.def)
		if err := v.BindEnv(s.key); err != nil {
			return nil, err
		}
		// Only flags this command has: --identity on send is the default
		// identity's override (drain's --identity is a filter, a list).
		if f := cmd.Flags().Lookup(s.flag); f != nil && f.Value.Type() == "string" {
			if err := v.BindPFlag(s.key, f); err != nil {
				return nil, err
			}
		}
	}

	path, explicit := configPath(cmd.Flags())
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		err := v.ReadInConfig()
		switch {
		case err == nil:
			// A misspelt key would silently fall back to a default (the
			// wrong store, say): refuse it.
			for _, k := range v.AllKeys() {
				if !knownKey(k) {
					return nil, usagef("config file %s: unknown setting %q (known: %s)", path, k, knownKeys())
				}
			}
		case !explicit && errors.Is(err, fs.ErrNotExist):
			path = "" // the default location is optional
		default:
			return nil, usagef("config file %s: %v", path, err)
		}
	}

	cfg := &config{
		Store:           v.GetString("store"),
		Output:          v.GetString("output"),
		Tenant:          v.GetString("tenant"),
		DefaultIdentity: v.GetString("default_identity"),
		Region:          v.GetString("region"),
		ConfigFile:      path,
		Health: health.Settings{
			MaxOldestQueued:     v.GetString("health.max_oldest_queued"),
			MaxStuck:            v.GetString("health.max_stuck"),
			MaxUnknown:          v.GetString("health.max_unknown"),
			MaxSendingPastLease: v.GetString("health.max_sending_past_lease"),
			Vitals:              map[string]string{},
			Window:              v.GetString("health.window"),
			NoProgressAfter:     v.GetString("health.no_progress_after"),
			MaxClockOffset:      v.GetString("health.max_clock_offset"),
			MaxDailyShare:       v.GetString("health.max_daily_recipients_share"),
		},
		ClockWarn: v.GetString("clock_warn"),
	}
	for _, t := range health.Vitals {
		cfg.Health.Vitals[t.Name] = v.GetString("health." + t.Name)
	}
	var raw map[string]identities.Config
	// A misspelt identity field (token_evn) is refused like a misspelt key.
	strict := func(c *mapstructure.DecoderConfig) { c.ErrorUnused = true }
	if err := v.UnmarshalKey("identities", &raw, strict); err != nil {
		return nil, usagef("config: identities: %v", err)
	}
	ids, err := identities.Parse(raw)
	if err != nil {
		return nil, err
	}
	cfg.Identities = ids
	if cfg.Store == "" {
		p, err := defaultStorePath()
		if err != nil {
			return nil, err
		}
		cfg.Store = "sqlite:" + p
	}
	if err := checkOutput(cmd, cfg.Output); err != nil {
		return nil, err
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(v.GetString("log_level"))); err != nil {
		return nil, usagef("unknown log level %q (want debug, info, warn or error)", v.GetString("log_level"))
	}
	return cfg, nil
}

// checkOutput accepts table and json for every command, and the formats a
// command names in its outputsAnnotation (stats: prometheus) for it alone.
func checkOutput(cmd *cobra.Command, out string) error {
	want := append([]string{outTable, outJSON}, strings.Fields(cmd.Annotations[outputsAnnotation])...)
	if slices.Contains(want, out) {
		return nil
	}
	if out == outPrometheus {
		return usagef("output format %q is only for msgq stats (want table or json)", out)
	}
	choices := strings.Join(want[:len(want)-1], ", ") + " or " + want[len(want)-1]
	return usagef("unknown output format %q (want %s)", out, choices)
}

func knownKey(k string) bool {
	if strings.HasPrefix(k, "identities.") {
		return true // checked field by field when the identities are parsed
	}
	for _, s := range settings {
		if s.key == k {
			return true
		}
	}
	return false
}

func knownKeys() string {
	var ks []string
	for _, s := range settings {
		ks = append(ks, s.key)
	}
	return strings.Join(append(ks, "identities"), ", ")
}

// configPath is --config, else $MSGQ_CONFIG, else the default location
// ($XDG_CONFIG_HOME/msgq/config.yaml or ~/.config/msgq/config.yaml), which
// may be absent. explicit says the user named a file, which must exist.
func configPath(flags *pflag.FlagSet) (string, bool) {
	if f := flags.Lookup("config"); f != nil && f.Changed {
		return f.Value.String(), true
	}
	if p := os.Getenv("MSGQ_CONFIG"); p != "" {
		return p, true
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "msgq", "config.yaml"), false
}

// defaultStorePath is $XDG_DATA_HOME/msgq/msgq.db, else
// ~/.local/share/msgq/msgq.db.
func defaultStorePath() (string, error) {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no --store given and no home directory for the default store: %w", err)
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "msgq", "msgq.db"), nil
}
