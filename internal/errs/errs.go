// Package errs defines the errors Meridian returns to clients. Each has a Kind that maps to one
// gRPC status code, and a one-line message that says what failed and why, so the CLI can print
// it as is ("Bad input gets a clear error").
package errs

import (
	"errors"
	"fmt"
)

// Kind classifies an error for the client.
type Kind int

const (
	// Invalid: the request is malformed or breaks a limit; retrying it unchanged cannot succeed.
	Invalid Kind = iota + 1
	// NotFound: the keyspace does not exist.
	NotFound
	// AlreadyExists: the keyspace exists.
	AlreadyExists
	// Unavailable: too few replicas are alive for the consistency level; nothing was attempted
	// or the write may have reached fewer replicas than the level needs.
	Unavailable
	// Timeout: the deadline passed before the level's replies arrived; a write may or may not
	// have taken effect (indeterminate).
	Timeout
	// Overloaded: a bounded queue is full; retry later.
	Overloaded
	// Internal: a bug or a storage failure.
	Internal
	// Exhausted: a resource of the node is used up (its disk is full); the request was
	// refused before anything was written. Retry elsewhere, or once the operator has freed
	// the resource.
	Exhausted
	// Conflict: a conditional change lost to a concurrent one (the cluster metadata changed
	// since the version the change was based on); nothing was done. Re-read and retry.
	Conflict
	// StalePlacement: the request was made under an older placement of its keyspace than
	// the node's (or a newer one than the node knows yet); nothing was done. Refresh the
	// keyspace's placement (describe-keyspace) and retry.
	StalePlacement
)

func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid argument"
	case NotFound:
		return "not found"
	case AlreadyExists:
		return "already exists"
	case Unavailable:
		return "unavailable"
	case Timeout:
		return "timeout"
	case Overloaded:
		return "overloaded"
	case Internal:
		return "internal"
	case Exhausted:
		return "resource exhausted"
	case Conflict:
		return "conflict"
	case StalePlacement:
		return "stale placement"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a client-facing error.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// New returns an error of kind k with a formatted message.
func New(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the Kind of err, Internal when err is not an *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}
