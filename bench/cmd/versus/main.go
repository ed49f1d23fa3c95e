// Command versus measures msgq and River side by side on one PostgreSQL
// database and one file system; `versus -h` tells how. bench/run runs it
// with the defaults bench/README.md quotes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/msgq/msgq/bench/versus"
)

func main() {
	// An interrupt ends the run where it is and still removes what it
	// made: schemas, files and the aged workload's template databases (a
	// few GiB at the default size).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := versus.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
