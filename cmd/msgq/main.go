// Command msgq is an outbound message queue that sends each message at most once.
package main

import (
	"os"

	"github.com/msgq/msgq/internal/cli"
)

func main() { os.Exit(cli.Main()) }
