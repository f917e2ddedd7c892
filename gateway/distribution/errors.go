package distribution

import (
	"errors"
	"fmt"

	"github.com/portcullis-dev/portcullis/lifecycle"
)

// A stream's errors are the lifecycle's domain errors, which the gateway
// root maps to codes in one place.

// invalidField is InvalidArgument naming the field.
func invalidField(path, format string, args ...any) error {
	return &lifecycle.FieldError{Path: path, Message: fmt.Sprintf(format, args...)}
}

// fieldAt prefixes the path of a field error with list[i].
func fieldAt(list string, i int, err error) error {
	var fe *lifecycle.FieldError
	if errors.As(err, &fe) {
		return &lifecycle.FieldError{Path: fmt.Sprintf("%s[%d].%s", list, i, fe.Path), Message: fe.Message}
	}
	return err
}

// missing names what was not found when err is store.ErrNotFound.
func missing(err error, format string, args ...any) error {
	return lifecycle.Missing(err, format, args...)
}
