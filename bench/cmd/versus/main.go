// Command versus measures msgq and River side by side on one PostgreSQL
// database and one file system. See bench/README or `versus -h`.
package main

import (
	"context"
	"os"

	"github.com/msgq/msgq/bench/versus"
)

func main() { os.Exit(versus.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
