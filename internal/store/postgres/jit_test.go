package postgres

import (
	"context"
	"slices"
	"testing"
)

// JIT compilation never pays for the drain's statements (a few look-ups
// by key), and it ran whenever planner settings priced them high: a claim
// turns sorts off, which priced the history_events trigger's ORDER BY at
// about 1e10, and every claim then compiled the trigger's statement with
// LLVM once an event endpoint existed (1 to 2 s of server CPU a claim,
// found by bench/run's endpoint workload). The triggers carry jit=off
// whoever fires them, and the claim's transaction turns it off.
func TestTheDrainsStatementsAreNeverCompiledWithJIT(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{})
	for _, fn := range []string{"history_events", "challenge_events"} {
		var config []string
		if err := h.pool.QueryRow(ctx, "SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = $1 AND pronamespace = $2::regnamespace",
			fn, h.schema).Scan(&config); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(config, "jit=off") {
			t.Errorf("function %s has settings %v, want jit=off", fn, config)
		}
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, claimSettingsSQL); err != nil {
		t.Fatal(err)
	}
	var jit, sort string
	if err := tx.QueryRow(ctx, "SELECT current_setting('jit'), current_setting('enable_sort')").Scan(&jit, &sort); err != nil {
		t.Fatal(err)
	}
	if jit != "off" || sort != "off" {
		t.Errorf("in a claim's transaction jit=%s, enable_sort=%s; want jit off wherever sorts are off", jit, sort)
	}
}
