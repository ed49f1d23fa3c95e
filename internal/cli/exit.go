package cli

import (
	"errors"
	"fmt"

	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/operator"
	"github.com/msgq/msgq/internal/phone"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

// Exit codes: a contract scripts and cron rely on; documented in the
// docs/exit-codes.md and in every command's help. Never renumber.
const (
	ExitOK       = 0 // done
	ExitError    = 1 // a runtime error: the store, the network, a bug
	ExitUsage    = 2 // bad input: nothing was written
	ExitConflict = 3 // an idempotency key reused with a different body
	ExitFound    = 4 // a check found something (stuck, reconcile, health)
)

const exitStatusHelp = `EXIT STATUS
  0  ok
  1  runtime error (store, network), a refused state change, or nothing in the store has the id or
     key given (one line says why; nothing was written)
  2  bad input or usage, refused before anything is looked up; nothing was written
  3  idempotency conflict: the key exists with a different body (the existing id is named)
  4  a check found something (stuck --fail-if-any, reconcile --fail-if-unresolved, health)`

// usageError is input msgq refuses before doing anything.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

// exitError carries an exit code chosen by a command (bulk send's summary,
// found-something checks) when the details were already printed.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode is the one place errors become exit codes.
func exitCode(err error) int {
	var (
		ue  *usageError
		ie  *store.InvalidError
		pe  *phone.Error
		re  *recipient.Error
		ee  *exitError
		se  *storeopen.URLError
		ok  *operator.OwnKeyError
		or  *operator.RefusedError
		hen *health.SettingError
		ic  *identities.ConfigError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, store.ErrConflict):
		return ExitConflict
	case errors.As(err, &or):
		// A refused verdict (the row's state, a live lease, a row that
		// moved on) is not bad input: the row was looked up.
		return ExitError
	case errors.Is(err, store.ErrNotFound):
		// One rule for every command: an id or key the store does not
		// have is not malformed input (exit 2 is for what is refused
		// before anything is looked up); it is a lookup that failed.
		return ExitError
	case errors.As(err, &ue), errors.As(err, &ie), errors.As(err, &pe), errors.As(err, &re),
		errors.As(err, &se), errors.As(err, &ok), errors.As(err, &hen), errors.As(err, &ic):
		return ExitUsage
	}
	return ExitError
}
