package gcos

import (
	"errors"
	"fmt"
)

// Error codes, few and coarse on purpose: the HTTP layer maps each to one status and the CLI to one exit code.
const (
	EINVALID      = "invalid"            // the caller's input is wrong; retrying it unchanged will fail again
	ENOTFOUND     = "not_found"          // the thing asked for does not exist
	ECONFLICT     = "conflict"           // the request clashes with current state (e.g. self-approval, second active ruleset)
	EUNAUTHORIZED = "unauthorized"       // no valid credential
	EFORBIDDEN    = "forbidden"          // a valid credential without the needed role
	EINTERNAL     = "internal"           // a bug or an unexpected failure; details are logged, not shown
	EUNAVAILABLE  = "unavailable"        // a dependency (the database) cannot be reached right now
	EGONE         = "gone"               // what was asked for existed but is gone for good (a feed cursor past retention)
	EMETHOD       = "method_not_allowed" // the path exists, under another method (HTTP 405)
)

// Error is a domain error whose code decides how the edge (HTTP, CLI) reports it and whose message is safe to show.
type Error struct {
	Code    string
	Message string
	err     error // the %w cause(s), kept for errors.Is/As
}

// Errorf builds a domain error; a %w verb in format keeps the wrapped cause reachable by errors.Is/As.
func Errorf(code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	e := &Error{Code: code, Message: wrapped.Error()}
	switch wrapped.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.err = wrapped // one or more %w causes: keep the chain
	}
	return e
}

// Error returns the message, which already carries its context.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause given to Errorf with %w, if any.
func (e *Error) Unwrap() error { return e.err }

// ErrorCode returns the code of the first *Error in err's chain, "" for nil, and EINTERNAL for anything else:
// an error nobody classified is treated as a bug.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, and a generic text for anything else so
// that internal details (SQL, hostnames) never reach a client.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
