// Command versus measures msgq and River side by side on one PostgreSQL
// database and one file system; `versus -h` tells how. bench/run runs it
// with the defaults bench/README.md quotes.
package main

import (
	"context"
	"os"

	"github.com/msgq/msgq/bench/versus"
)

func main() { os.Exit(versus.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
