package runner

import (
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/internal/protocol"
)

// toolError is a failure the runner reports with an error kind other than ExitCode:
// the tool could not run (Exception) or refused to write over a changed file (Stale).
type toolError struct {
	kind string
	msg  string
	// cause is the system error behind msg, if any, for errors.Is.
	cause error
}

func (e *toolError) Error() string { return e.msg }

func (e *toolError) Unwrap() error { return e.cause }

// exceptionf reports that the tool could not run; nothing was changed.
func exceptionf(format string, args ...any) error {
	return &toolError{kind: protocol.KindException, msg: fmt.Sprintf(format, args...)}
}

// stalef reports that a file changed since it was read; nothing was written.
func stalef(format string, args ...any) error {
	return &toolError{kind: protocol.KindStale, msg: fmt.Sprintf(format, args...)}
}

// errorKind returns the error kind of err: the kind of a toolError, else Exception.
func errorKind(err error) string {
	var te *toolError
	if errors.As(err, &te) {
		return te.kind
	}
	return protocol.KindException
}
