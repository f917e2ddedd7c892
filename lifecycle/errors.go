package lifecycle

import (
	"errors"
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Errors the lifecycle returns for what the caller asked, each carrying
// the message its user sees (the API maps each to one code); anything
// else is an internal error.

// FieldError: a field of the request is invalid.
type FieldError struct {
	Path    string
	Message string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

// Field returns a FieldError for path.
func Field(path, format string, args ...any) error {
	return &FieldError{Path: path, Message: fmt.Sprintf(format, args...)}
}

// NotFoundError: what the request names does not exist (or is not the
// caller's to see).
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// ConflictError: a stale expected version, or a race another writer won.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// PreconditionError: the request cannot be served in the present state
// (a frozen sandbox, a proposal that no longer applies).
type PreconditionError struct{ Msg string }

func (e *PreconditionError) Error() string { return e.Msg }

// PermissionError: the caller may never do this (a proposer approving its
// own proposal).
type PermissionError struct{ Msg string }

func (e *PermissionError) Error() string { return e.Msg }

// RateLimitError: the sandbox is over its proposal rate; retry after.
type RateLimitError struct{ After time.Duration }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("too many proposals from this sandbox; retry in %d s", RetrySeconds(e.After))
}

// RetrySeconds is d rounded up to whole seconds, at least one.
func RetrySeconds(d time.Duration) uint32 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return uint32(s)
}

// Missing names what was not found when err is store.ErrNotFound.
func Missing(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return &NotFoundError{fmt.Sprintf(format, args...)}
	}
	return err
}

func frozenError(sb store.Sandbox, doing string) error {
	return &PreconditionError{fmt.Sprintf("sandbox %q is frozen (%s): unfreeze it %s", sb.Name, sb.FrozenReason, doing)}
}
