package cli

import (
	"io"
	"os"

	"github.com/mattn/go-isatty"
)

// IOStreams are where a command reads and writes: data to Out, diagnostics
// to Err. Tests pass buffers.
type IOStreams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// ErrTTY says Err is a terminal (progress bars go there, and only then).
	ErrTTY bool
}

// System returns the process's standard streams.
func System() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		ErrTTY: isatty.IsTerminal(os.Stderr.Fd()) || isatty.IsCygwinTerminal(os.Stderr.Fd())}
}
